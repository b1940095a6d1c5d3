package shard

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/l4xg/grid/internal/testclock"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/raftlog"
)

// openMuxHost opens a host with two shards on its own loopback mux; it
// hosts no replica until the test starts one.
func openMuxHost(t *testing.T, dir string, clock *testclock.Clock, reg prometheus.Registerer) *Host {
	t.Helper()
	m, err := raftlog.ListenMux("127.0.0.1:0", raftlog.MuxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := OpenHost(HostConfig{NodeID: "n0", DataDir: dir, Shards: 2, Mux: m, Clock: clock.Now,
		TickInterval: time.Hour, HeartbeatTimeout: 100 * time.Millisecond, NoSync: true, Registry: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		_ = m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.Close()
		_ = m.Close()
	})
	return h
}

// startLeader starts host h's replica of shard id and waits until it leads.
func startLeader(t *testing.T, h *Host, id int, bootstrap bool) *Replica {
	t.Helper()
	s, err := h.StartReplica(id, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "the replica to lead", s.IsLeader)
	return s
}

// TestHostHostsWhatItIsTold: a host starts with no replica, with a Mux or
// without (nothing routes, nothing to wait for), rejects shard ids out of
// range naming the range, and refuses to start replicas once closed.
func TestHostHostsWhatItIsTold(t *testing.T) {
	alone, err := OpenHost(HostConfig{DataDir: t.TempDir(), NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(alone.Replicas()); n != 0 || !alone.Ready() {
		t.Errorf("a new host without a Mux: %d replicas, ready %v; want none, true", n, alone.Ready())
	}
	if err := alone.Close(); err != nil {
		t.Fatal(err)
	}

	h := openMuxHost(t, t.TempDir(), testclock.New(), nil)
	d := reserve("a", 0).Digest
	if len(h.Replicas()) != 0 || h.Replica(0) != nil || h.For(d) != nil || !h.Ready() || !h.HasLeader() {
		t.Fatalf("a new host on a Mux: %d replicas, For %v, ready %v, has leader %v; want none, nil, true, true",
			len(h.Replicas()), h.For(d), h.Ready(), h.HasLeader())
	}
	for _, id := range []int{-1, 2} {
		if _, err := h.StartReplica(id, true); !errors.Is(err, ErrNoSuchShard) || !strings.Contains(err.Error(), "0..1") {
			t.Errorf("StartReplica(%d): %v, want ErrNoSuchShard naming 0..1", id, err)
		}
		if err := h.StopReplica(id, true); !errors.Is(err, ErrNoSuchShard) {
			t.Errorf("StopReplica(%d): %v, want ErrNoSuchShard", id, err)
		}
	}
	if err := h.StopReplica(1, false); err != nil {
		t.Fatalf("stopping a replica that does not run: %v", err)
	}

	s, err := h.StartReplica(1, false)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.HeartbeatTimeout != 100*time.Millisecond {
		t.Fatalf("replica heartbeat timeout %v, want the host's 100ms", s.cfg.HeartbeatTimeout)
	}
	if h.HasLeader() {
		t.Fatal("HasLeader with a replica that joined no group")
	}
	if got := h.Replicas(); len(got) != 1 || got[0] != s || h.Replica(1) != s {
		t.Fatalf("Shards %v after starting shard 1's replica %p", got, s)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.StartReplica(0, true); !errors.Is(err, ErrClosed) {
		t.Fatalf("StartReplica after Close: %v, want ErrClosed", err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestStopReplicaKeepsOrPurges: without purge a stopped replica's records
// (hot, cold and in a snapshot) survive its restart, even without
// bootstrap; with purge its log, snapshots, cold sstable files and cold
// records are gone, and the next start is a new group: the record is absent
// and Raft's term and index start over.
func TestStopReplicaKeepsOrPurges(t *testing.T) {
	dir, clock := t.TempDir(), testclock.New()
	h := openMuxHost(t, dir, clock, nil)
	s := startLeader(t, h, 0, true)
	settled := reserve("settled", time.Minute)
	got := propose(t, s, settled)[0]
	propose(t, s, keyspace.Command{Op: keyspace.OpComplete, Digest: settled.Digest, Token: got.Token,
		Retention: (72 * time.Hour).Milliseconds(), Result: []byte("receipt")})
	clock.Add(25 * time.Hour) // past the hot window: the tick demotes it
	if _, err := s.prop.propose(context.Background(), nil, true); err != nil {
		t.Fatal(err)
	}
	propose(t, s, reserve("hot", time.Hour))
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.Cold.Keys != 1 || st.Keys != 1 {
		t.Fatalf("before stopping: hot %d, cold %d; want 1, 1", st.Keys, st.Cold.Keys)
	}

	if err := h.StopReplica(0, false); err != nil {
		t.Fatal(err)
	}
	if h.Replica(0) != nil || h.For(settled.Digest) != nil {
		t.Fatal("a stopped replica is still hosted")
	}
	s = startLeader(t, h, 0, false)
	for _, key := range []string{"settled", "hot"} {
		if res, err := s.Get(context.Background(), reserve(key, 0).Digest, false); err != nil || res.State == keyspace.Absent {
			t.Fatalf("after a restart without purge, %s: %+v, %v", key, res, err)
		}
	}
	kept := s.Status()

	if err := h.StopReplica(0, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.purgeMarker(0)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after purge, the purge marker: %v, want it gone", err)
	}
	if snaps, err := raftlog.OpenSnapshots(h.snapshotDir(), 0, 2, nil); err != nil {
		t.Fatal(err)
	} else if metas, err := snaps.List(); err != nil || len(metas) != 0 {
		t.Errorf("after purge, snapshots %v, %v; want none", metas, err)
	} else if _, err := os.Stat(snaps.FilesDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after purge, the snapshots' files: %v, want them gone", err)
	}
	if last, err := h.logs.Group(0).LastIndex(); err != nil || last != 0 {
		t.Errorf("after purge, the group's last log index: %d, %v; want 0", last, err)
	}
	if _, found, err := h.cold.Shard(0).Lookup(settled.Digest); found || err != nil {
		t.Errorf("after purge, the cold record: found %v, %v", found, err)
	}

	s = startLeader(t, h, 0, true)
	for _, key := range []string{"settled", "hot"} {
		if res, err := s.Get(context.Background(), reserve(key, 0).Digest, false); err != nil || res.State != keyspace.Absent {
			t.Fatalf("after a purge, %s: %+v, %v; want it absent", key, res, err)
		}
	}
	if st := s.Status(); st.Term >= kept.Term || st.LastIndex >= kept.LastIndex {
		t.Fatalf("after a purge: term %d, last index %d; before it %d, %d: want a new group",
			st.Term, st.LastIndex, kept.Term, kept.LastIndex)
	}
}

// TestInterruptedPurgeIsFinished: a purge marker left by a crash makes the
// next start delete the rest of the replica's state before opening it.
func TestInterruptedPurgeIsFinished(t *testing.T) {
	dir := t.TempDir()
	h := openMuxHost(t, dir, testclock.New(), nil)
	s := startLeader(t, h, 1, true)
	propose(t, s, reserve("x", time.Hour))
	if err := h.StopReplica(1, false); err != nil {
		t.Fatal(err)
	}
	// The crash came after the marker was written and the snapshots went,
	// with the log still there.
	if err := os.WriteFile(filepath.Join(dir, "purging-shard-1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := raftlog.PurgeSnapshots(h.snapshotDir(), 1); err != nil {
		t.Fatal(err)
	}
	s = startLeader(t, h, 1, true)
	if res, err := s.Get(context.Background(), reserve("x", 0).Digest, false); err != nil || res.State != keyspace.Absent {
		t.Fatalf("after an interrupted purge and a start: %+v, %v; want the record absent", res, err)
	}
	if _, err := os.Stat(h.purgeMarker(1)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the purge marker after the start: %v", err)
	}
}

// TestReplicaLifecycleRaces: concurrent starts of one shard return one
// replica; starts and stops race with routing, readiness and metric
// scrapes of the host (go test -race checks the rest).
func TestReplicaLifecycleRaces(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := openMuxHost(t, t.TempDir(), testclock.New(), reg)
	var wg sync.WaitGroup
	started := make([]*Replica, 4)
	for i := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started[i], _ = h.StartReplica(0, true)
		}()
	}
	wg.Wait()
	for _, s := range started {
		if s == nil || s != started[0] {
			t.Fatalf("concurrent starts of shard 0 returned %v; want one replica", started)
		}
	}

	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		d := reserve("r", 0).Digest
		for {
			select {
			case <-stop:
				readErr <- nil
				return
			default:
			}
			_ = h.For(d)
			_ = h.Ready()
			_ = h.HasLeader()
			for _, s := range h.Replicas() {
				_ = s.Status()
			}
			if _, err := reg.Gather(); err != nil {
				readErr <- err
				return
			}
		}
	}()
	for i := range 6 {
		if _, err := h.StartReplica(1, true); err != nil {
			t.Fatal(err)
		}
		if err := h.StopReplica(1, i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-readErr; err != nil {
		t.Fatalf("scrape during starts and stops: %v", err)
	}
	if got := h.Replicas(); len(got) != 1 || got[0] != started[0] {
		t.Fatalf("hosted after the churn: %v, want shard 0's replica only", got)
	}
}

// TestNewClusterMemberAdoptsTheClusterShardCount: a new data directory
// opened on a Mux without a shard count has none (no replica starts, no
// hard settings are written) until AdoptShards fixes the cluster's; the
// count then is the directory's, kept at the next open, and another count
// is refused wrapping ErrHardSettings. A host opened with a count refuses
// another one too.
func TestNewClusterMemberAdoptsTheClusterShardCount(t *testing.T) {
	dir := t.TempDir()
	open := func(shards int) (*Host, error) {
		m, err := raftlog.ListenMux("127.0.0.1:0", raftlog.MuxConfig{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := OpenHost(HostConfig{NodeID: "n0", DataDir: dir, Shards: shards, Mux: m, NoSync: true,
			TickInterval: time.Hour, HeartbeatTimeout: 100 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			_ = m.Close()
			return nil, err
		}
		t.Cleanup(func() {
			_ = h.Close()
			_ = m.Close()
		})
		return h, nil
	}
	h, err := open(0)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.Settings().Shards; n != 0 {
		t.Fatalf("a new cluster member's host has %d shards before adopting, want 0", n)
	}
	if _, err := h.StartReplica(0, true); !errors.Is(err, ErrNoSuchShard) {
		t.Fatalf("StartReplica before the count is known: %v, want ErrNoSuchShard", err)
	}
	if _, err := os.Stat(filepath.Join(dir, settingsFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("hard settings written before the count is known: %v", err)
	}
	if err := h.AdoptShards(0); err == nil {
		t.Fatal("AdoptShards(0) succeeded")
	}
	if err := h.AdoptShards(3); err != nil {
		t.Fatal(err)
	}
	if err := h.AdoptShards(3); err != nil {
		t.Fatalf("adopting the same count again: %v", err)
	}
	if err := h.AdoptShards(5); !errors.Is(err, ErrHardSettings) {
		t.Fatalf("AdoptShards(5) after 3: %v, want ErrHardSettings", err)
	}
	startLeader(t, h, 2, true)
	if _, err := h.StartReplica(3, true); !errors.Is(err, ErrNoSuchShard) {
		t.Fatalf("StartReplica(3) of 3 shards: %v, want ErrNoSuchShard", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}

	// The count is the directory's now: a default open takes it, another
	// is refused.
	if h, err = open(0); err != nil {
		t.Fatal(err)
	}
	if n := h.Settings().Shards; n != 3 {
		t.Fatalf("reopened: %d shards, want the adopted 3", n)
	}
	if err := h.AdoptShards(4); !errors.Is(err, ErrHardSettings) {
		t.Fatalf("AdoptShards(4) on a directory of 3: %v, want ErrHardSettings", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := open(8); !errors.Is(err, ErrHardSettings) {
		t.Fatalf("open with --shards 8 on a directory of 3: %v, want ErrHardSettings", err)
	}
}
