package raftlog

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/testwait"
)

// listFSM records every applied command, in order.
type listFSM struct {
	mu   sync.Mutex
	cmds []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, string(l.Data))
	return len(f.cmds)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return listSnapshot(slices.Clone(f.cmds)), nil
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var cmds []string
	if err := json.NewDecoder(rc).Decode(&cmds); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = cmds
	return nil
}

func (f *listFSM) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cmds)
}

type listSnapshot []string

func (s listSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (listSnapshot) Release() {}

// raftNode is a single-voter raft group running on a JournalGroup.
type raftNode struct {
	r     *raft.Raft
	fsm   *listFSM
	g     *JournalGroup
	snaps raft.SnapshotStore
	trans *raft.InmemTransport
}

func startRaft(t *testing.T, s *Journal, snapDir string, group uint64, bootstrap bool) *raftNode {
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(fmt.Sprintf("node-g%d", group))
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.SnapshotInterval = time.Hour // snapshots only when the test asks
	conf.SnapshotThreshold = 1 << 30
	conf.TrailingLogs = 10
	conf.LogOutput = io.Discard

	n := &raftNode{fsm: &listFSM{}, g: s.Group(group)}
	var err error
	if n.snaps, err = OpenSnapshots(snapDir, group, 2, nil); err != nil {
		t.Fatal(err)
	}
	var addr raft.ServerAddress
	addr, n.trans = raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("g%d", group)))
	if bootstrap {
		cfg := raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: addr}}}
		if err := raft.BootstrapCluster(conf, n.g, n.g, n.snaps, n.trans, cfg); err != nil {
			t.Fatalf("group %d: bootstrap: %v", group, err)
		}
	}
	if n.r, err = raft.NewRaft(conf, n.fsm, n.g, n.g, n.snaps, n.trans); err != nil {
		t.Fatalf("group %d: NewRaft: %v", group, err)
	}
	// Wait for leadership: re-check the state after every notification on
	// the (buffered, lossy) leader channel.
	timeout := time.After(10 * time.Second)
	for n.r.State() != raft.Leader {
		select {
		case <-n.r.LeaderCh():
		case <-timeout:
			t.Fatalf("group %d: no leader after 10s (state %v)", group, n.r.State())
		}
	}
	return n
}

func (n *raftNode) shutdown(t *testing.T) {
	t.Helper()
	if err := n.r.Shutdown().Error(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := n.trans.Close(); err != nil {
		t.Fatal(err)
	}
}

// apply applies cmds, pipelined, and waits for all of them.
func (n *raftNode) apply(cmds []string) error {
	futures := make([]raft.ApplyFuture, len(cmds))
	for i, c := range cmds {
		futures[i] = n.r.Apply([]byte(c), 10*time.Second)
	}
	for i, f := range futures {
		if err := f.Error(); err != nil {
			return fmt.Errorf("apply %d: %w", i, err)
		}
	}
	return nil
}

func commandsFor(group uint64, n int) []string {
	cmds := make([]string, n)
	for i := range cmds {
		cmds[i] = fmt.Sprintf("g%d-cmd-%d", group, i)
	}
	return cmds
}

// TestRaftOnJournal runs two real raft groups on one Journal, restarts the
// process state (new Journal, new rafts) on the same directories and checks
// that both groups recover their logs, terms and FSM state.
func TestRaftOnJournal(t *testing.T) {
	dir := t.TempDir()
	logDir, snapDir := filepath.Join(dir, "raft"), filepath.Join(dir, "snapshots")
	const n1, n2 = 300, 200
	cmds1, cmds2 := commandsFor(1, n1), commandsFor(2, n2)

	s, err := OpenJournal(logDir, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := startRaft(t, s, snapDir, 1, true)
	b := startRaft(t, s, snapDir, 2, true)
	var wg sync.WaitGroup
	for _, job := range []struct {
		n    *raftNode
		cmds []string
	}{{a, cmds1}, {b, cmds2}} {
		wg.Go(func() {
			if err := job.n.apply(job.cmds); err != nil {
				t.Errorf("group %d: %v", job.n.g.ID(), err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Snapshot group 1 only: raft compacts its log with DeleteRange.
	if err := a.r.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	lastA, lastB := a.r.LastIndex(), b.r.LastIndex()
	if lastA < n1 || lastB < n2 {
		t.Fatalf("LastIndex = %d, %d; want >= %d, %d", lastA, lastB, n1, n2)
	}
	if got := a.fsm.commands(); !slices.Equal(got, cmds1) {
		t.Fatalf("group 1 FSM applied %d commands, want %d in order", len(got), n1)
	}
	termA, err := a.g.GetUint64([]byte("CurrentTerm"))
	if err != nil || termA == 0 {
		t.Fatalf("group 1 CurrentTerm = %d, %v; want > 0", termA, err)
	}
	a.shutdown(t)
	b.shutdown(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// "Restart": everything below reads from disk.
	s = openJournal(t, logDir, JournalOptions{})
	ga, gb := s.Group(1), s.Group(2)

	firstA, _ := ga.FirstIndex()
	if gotLast, _ := ga.LastIndex(); firstA <= 1 || gotLast != lastA || lastA-firstA+1 < 10 {
		t.Fatalf("group 1 log = [%d, %d]; want compacted (first > 1), ending at %d, >= 10 trailing entries", firstA, gotLast, lastA)
	}
	// Group 2 was never compacted: its whole log is there, and its commands
	// are exactly cmds2 in order. Group 1's compaction did not touch it.
	if first, _ := gb.FirstIndex(); first != 1 {
		t.Fatalf("group 2 FirstIndex = %d, want 1", first)
	}
	if got := commandsInLog(t, gb); !slices.Equal(got, cmds2) {
		t.Fatalf("group 2 log holds %d commands, want %d in order", len(got), n2)
	}
	if got := commandsInLog(t, ga); !slices.Equal(got, cmds1[len(cmds1)-len(got):]) || len(got) == 0 {
		t.Fatalf("group 1 log tail holds %d commands that are not a suffix of what was applied", len(got))
	}
	if term, err := ga.GetUint64([]byte("CurrentTerm")); err != nil || term != termA {
		t.Fatalf("group 1 CurrentTerm after reopen = %d, %v; want %d", term, err, termA)
	}

	a = startRaft(t, s, snapDir, 1, false)
	b = startRaft(t, s, snapDir, 2, false)
	defer a.shutdown(t)
	defer b.shutdown(t)
	for _, c := range []struct {
		n    *raftNode
		last uint64
		cmds []string
	}{{a, lastA, cmds1}, {b, lastB, cmds2}} {
		id := c.n.g.ID()
		if got := c.n.r.LastIndex(); got < c.last {
			t.Fatalf("group %d: recovered LastIndex = %d, want >= %d", id, got, c.last)
		}
		if err := c.n.r.Barrier(10 * time.Second).Error(); err != nil {
			t.Fatal(err)
		}
		if got := c.n.fsm.commands(); !slices.Equal(got, c.cmds) {
			t.Fatalf("group %d: FSM recovered %d commands, want %d in order", id, len(got), len(c.cmds))
		}
		f := c.n.r.Apply([]byte("after-restart"), 10*time.Second)
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		if f.Index() <= c.last {
			t.Fatalf("group %d: new entry got index %d, want > %d", id, f.Index(), c.last)
		}
	}
}

// commandsInLog returns the data of every LogCommand entry in g, in order,
// and fails on a gap between FirstIndex and LastIndex.
func commandsInLog(t *testing.T, g *JournalGroup) []string {
	t.Helper()
	first, err := g.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := g.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for i := first; i <= last && first > 0; i++ {
		var l raft.Log
		if err := g.GetLog(i, &l); err != nil {
			t.Fatalf("group %d: GetLog(%d) in [%d, %d]: %v", g.ID(), i, first, last, err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		if l.AppendedAt.IsZero() { // raft sets it on commands; bootstrap does not
			t.Fatalf("group %d: command entry %d lost AppendedAt", g.ID(), i)
		}
		cmds = append(cmds, string(l.Data))
	}
	return cmds
}

// Raft on a journal whose disk is full: its entries are refused, so the
// leader steps down and is elected again, saving a new term each time,
// which the journal keeps room for: raft does not panic ("failed to save
// current term"). Once space is freed the group commits again, by itself.
func TestRaftOnAFullDisk(t *testing.T) {
	m := newMemFS()
	j, err := OpenJournal(memDir, JournalOptions{SegmentSize: 64 << 10, fs: m})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	n := startRaft(t, j, t.TempDir(), 1, true)
	defer n.shutdown(t)
	if err := n.apply(commandsFor(1, 50)); err != nil {
		t.Fatal(err)
	}
	m.setCapacity(m.used())
	// Fill the segment and its spare: commands fail from then on.
	var refused error
	for i := 0; i < 100_000 && refused == nil; i++ {
		refused = n.r.Apply(make([]byte, 200), 5*time.Second).Error()
	}
	if refused == nil {
		t.Fatal("commands on a full disk keep being committed")
	}
	term := func() uint64 {
		v, _ := j.Group(1).GetUint64([]byte("CurrentTerm"))
		return v
	}
	start := term()
	testwait.For(t, 20*time.Second, "raft to go through new terms on the full disk", func() bool {
		_ = n.r.Apply([]byte("x"), 100*time.Millisecond).Error()
		return term() >= start+3
	})
	m.setCapacity(0)
	testwait.For(t, 20*time.Second, "a command committed once space is freed", func() bool {
		return n.r.Apply([]byte("after"), time.Second).Error() == nil
	})
}
