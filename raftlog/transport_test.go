package raftlog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/testwait"
)

// TestTransportReplicatesGroups: 3 nodes, 3 groups across them, one
// listener per node. Every group elects a leader and replicates what it
// applies to both followers.
func TestTransportReplicatesGroups(t *testing.T) {
	c := startMuxCluster(t, 3, []uint64{1, 2, 3})
	want := c.applyAll("a", 200, -1)
	c.waitReplicated(want, 0, 1, 2)
}

// TestTransportTimesReplication: OnReplicate sees the AppendEntries that
// carry entries, each from a group's leader to one of its followers, and
// no heartbeats.
func TestTransportTimesReplication(t *testing.T) {
	c := startMuxCluster(t, 3, []uint64{1})
	want := c.applyAll("a", 100, -1)
	c.waitReplicated(want, 0, 1, 2)
	leader := nodeID(c.leaderOf(1, -1))
	c.mu.Lock()
	defer c.mu.Unlock()
	sent := map[raft.ServerID]int{}
	for _, r := range c.replicated {
		if r.entries <= 0 || r.took <= 0 || r.group != 1 || r.to == r.from {
			t.Fatalf("report %+v: want entries and a time, from a node to another", r)
		}
		if r.from == leader {
			sent[r.to] += r.entries
		}
	}
	for i := range c.nodes {
		if id := nodeID(i); id != leader && sent[id] < 100 {
			t.Errorf("the leader %s reported %d entries sent to %s, want at least the 100 applied", leader, sent[id], id)
		}
	}
}

// TestTransportIsolateLeader: isolating the node that leads group 1 makes
// the other two elect a new leader of group 1 and keep committing in every
// group, without the isolated node seeing any of it; after Heal the
// isolated node catches up.
func TestTransportIsolateLeader(t *testing.T) {
	c := startMuxCluster(t, 3, []uint64{1, 2, 3})
	before := c.applyAll("before", 20, -1)
	c.waitReplicated(before, 0, 1, 2)

	old := c.waitLeader(1, -1)
	c.nodes[old].faults.Isolate()
	during := c.applyAll("during", 20, old) // leaders on the other two only
	var others []int
	for i := range c.nodes {
		if i != old {
			others = append(others, i)
		}
	}
	all := concat(before, during)
	c.waitReplicated(all, others...)
	for _, g := range c.groups {
		got := c.nodes[old].replicas[g].fsm.commands()
		if slices.ContainsFunc(got, func(cmd string) bool { return strings.HasPrefix(cmd, "during/") }) {
			t.Fatalf("group %d: the isolated node applied a command committed while it was isolated", g)
		}
	}
	// Compact the logs the isolated node misses, so that it usually
	// catches up by InstallSnapshot. (Not always: a request built before
	// the compaction may reach it just after Heal. TestTransportJoin
	// checks snapshots deterministically.)
	c.snapshotAll(others...)

	c.nodes[old].faults.Heal()
	c.waitReplicated(all, 0, 1, 2)
	after := c.applyAll("after", 20, -1)
	c.waitReplicated(concat(all, after), 0, 1, 2)
}

// TestTransportJoin: a fourth node joins every group after the others have
// compacted their logs, so each group streams it a snapshot over the Mux.
func TestTransportJoin(t *testing.T) {
	c := startMuxCluster(t, 3, []uint64{1, 2})
	want := c.applyAll("a", 20, -1)
	c.waitReplicated(want, 0, 1, 2)
	c.snapshotAll(0, 1, 2)
	n := c.addNode()
	c.waitReplicated(want, 0, 1, 2, n)
	for _, g := range c.groups {
		r := c.nodes[n].replicas[g].r
		// Raft restores the FSM before it records the snapshot: wait.
		testwait.For(t, 10*time.Second, fmt.Sprintf("group %d: new node installed a snapshot", g), func() bool {
			return r.Stats()["last_snapshot_index"] != "0"
		})
	}
	more := c.applyAll("b", 20, -1)
	c.waitReplicated(concat(want, more), 0, 1, 2, n)
}

// TestTransportRoutesByGroupWithoutPipelining: the transport refuses
// pipelined AppendEntries (raft 1.7.2 can hang in Shutdown on a stuck
// pipeline, raft#612: keep it off), and AppendEntries reach the group named
// in the header even when another group shares the peer's listener.
func TestTransportRoutesByGroupWithoutPipelining(t *testing.T) {
	a, b := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	cfg := TransportConfig{Timeout: 5 * time.Second}
	ta, err := NewTransport(a, 7, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := NewTransport(b, 7, cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewTransport(b, 8, cfg) // must see nothing
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewTransport(b, 8, cfg); !errors.Is(err, ErrGroupRegistered) {
		t.Fatalf("second transport for group 8 = %v, want ErrGroupRegistered", err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { serveAppends(t, tb, other, done) })
	t.Cleanup(func() {
		close(done)
		wg.Wait()
		for _, tr := range []*Transport{ta, tb, other} {
			_ = tr.Close()
		}
	})

	if p, err := ta.AppendEntriesPipeline("b", tb.LocalAddr()); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		if p != nil {
			_ = p.Close()
		}
		t.Fatalf("AppendEntriesPipeline = %v, want ErrPipelineReplicationNotSupported (pipelining must stay off)", err)
	}
	for i := range uint64(100) {
		req := &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: i, Entries: []*raft.Log{{Index: i + 1, Term: 1}}}
		var resp raft.AppendEntriesResponse
		if err := ta.AppendEntries("b", tb.LocalAddr(), req, &resp); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if resp.LastLog != i+1 {
			t.Fatalf("append %d: response LastLog %d", i, resp.LastLog)
		}
	}
}

// serveAppends answers AppendEntries on tr until done, and fails the test
// if any RPC arrives on other.
func serveAppends(t *testing.T, tr, other *Transport, done <-chan struct{}) {
	for {
		select {
		case rpc := <-tr.Consumer():
			req, ok := rpc.Command.(*raft.AppendEntriesRequest)
			if !ok {
				rpc.Respond(nil, fmt.Errorf("unexpected %T", rpc.Command))
				continue
			}
			rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true, LastLog: req.PrevLogEntry + uint64(len(req.Entries))}, nil)
		case rpc := <-other.Consumer():
			t.Errorf("group 8 received %T", rpc.Command)
			rpc.Respond(nil, fmt.Errorf("wrong group"))
		case <-done:
			return
		}
	}
}

// TestTransportPause: a paused follower falls behind while the other two
// commit, its connections stay open, and after Resume it catches up.
func TestTransportPause(t *testing.T) {
	c := startMuxCluster(t, 3, []uint64{1})
	leader := c.waitLeader(1, -1)
	paused := (leader + 1) % 3
	c.nodes[paused].faults.Pause()
	defer c.nodes[paused].faults.Resume()
	want := c.applyAll("p", 20, paused)
	others := []int{leader, 3 - leader - paused}
	c.waitReplicated(want, others...)
	if got := c.nodes[paused].replicas[1].fsm.commands(); len(got) != 0 {
		t.Fatalf("paused node applied %d commands", len(got))
	}
	c.nodes[paused].faults.Resume()
	c.waitReplicated(want, 0, 1, 2)
}

// TestVotesOutliveDeadPooledConnections: a vote request, a pre-vote
// request and a TimeoutNow reach the peer although every connection the
// NetworkTransport pooled for it died while idle, whichever side closed
// it: each is sent again on another connection instead of failing, so
// that an election after a fault does not lose a vote it could get and
// wait out an election timeout for the next one.
func TestVotesOutliveDeadPooledConnections(t *testing.T) {
	for _, side := range []string{"candidate", "voter"} {
		t.Run("closed by the "+side, func(t *testing.T) {
			fa, fb := &Faults{}, &Faults{}
			a, b := newMux(t, MuxConfig{Faults: fa}), newMux(t, MuxConfig{Faults: fb})
			const maxPool = 3
			ta := newTransport(t, a, 1, TransportConfig{MaxPool: maxPool})
			tb := newTransport(t, b, 1, TransportConfig{MaxPool: maxPool})
			var votes atomic.Int32
			serving(t, tb, func(rpc raft.RPC) {
				switch rpc.Command.(type) {
				case *raft.RequestVoteRequest:
					votes.Add(1)
					rpc.Respond(&raft.RequestVoteResponse{Term: 3, Granted: true}, nil)
				case *raft.RequestPreVoteRequest:
					rpc.Respond(&raft.RequestPreVoteResponse{Term: 3, Granted: true}, nil)
				case *raft.TimeoutNowRequest:
					rpc.Respond(&raft.TimeoutNowResponse{}, nil)
				default:
					rpc.Respond(nil, fmt.Errorf("unexpected %T", rpc.Command))
				}
			})
			to := raft.ServerAddress(b.Addr().String())
			vote := func() error {
				req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte(a.Addr().String())}, Term: 3}
				var resp raft.RequestVoteResponse
				if err := ta.RequestVote("b", to, req, &resp); err != nil {
					return err
				}
				if !resp.Granted {
					return errors.New("vote not granted")
				}
				return nil
			}
			// Fill the pool: maxPool votes at once take a connection each
			// and give it back.
			var wg sync.WaitGroup
			errs := make(chan error, maxPool)
			for range maxPool {
				wg.Go(func() { errs <- vote() })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			// Every connection dies while pooled (Isolate closes them on
			// its side), and the network heals.
			f := fa
			if side == "voter" {
				f = fb
			}
			f.Isolate()
			f.Heal()
			before := votes.Load()
			if err := vote(); err != nil {
				t.Fatalf("vote after the pooled connections died: %v", err)
			}
			if n := votes.Load() - before; n != 1 {
				t.Errorf("the voter got the vote request %d times, want once", n)
			}
			f.Isolate()
			f.Heal()
			pre := &raft.RequestPreVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte(a.Addr().String())}, Term: 4}
			if err := ta.RequestPreVote("b", to, pre, &raft.RequestPreVoteResponse{}); err != nil {
				t.Fatalf("pre-vote after the pooled connections died: %v", err)
			}
			f.Isolate()
			f.Heal()
			now := &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte(a.Addr().String())}}
			if err := ta.TimeoutNow("b", to, now, &raft.TimeoutNowResponse{}); err != nil {
				t.Fatalf("TimeoutNow after the pooled connections died: %v", err)
			}
		})
	}
}
