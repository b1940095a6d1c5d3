package shard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/testclock"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/tiering"
)

// replicaSet is one shard replicated three ways in process: each replica has
// its own Raft log store and cold tier on disk, linked by in-memory
// transports, all stamping with one fake clock.
type replicaSet struct {
	t        *testing.T
	clock    *testclock.Clock
	replicas []*Replica
}

func openReplicaSet(t *testing.T, n int) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, clock: testclock.New()}
	trans := make([]*raft.InmemTransport, n)
	peers := make([]raft.Server, n)
	for i := range n {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("r%d", i)))
		trans[i] = tr
		peers[i] = raft.Server{ID: raft.ServerID(fmt.Sprintf("r%d", i)), Address: addr}
	}
	for i := range trans {
		for j := range trans {
			if i != j {
				trans[i].Connect(peers[j].Address, trans[j])
			}
		}
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range n {
		dir := t.TempDir()
		logs, err := raftlog.OpenJournal(filepath.Join(dir, "journal"), raftlog.JournalOptions{NoSync: true, Logger: pebbleLogger{discard}})
		if err != nil {
			t.Fatal(err)
		}
		cold, err := tiering.Open(filepath.Join(dir, "cold"), tiering.Options{Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(Config{
			ID: 0, NodeID: string(peers[i].ID), SnapshotDir: filepath.Join(dir, "snapshots"), Logs: logs,
			Transport: trans[i], Bootstrap: true, Peers: peers, Cold: cold.Shard(0),
			Clock: rs.clock.Now, TickInterval: time.Hour, HeartbeatTimeout: 200 * time.Millisecond, Logger: discard,
		})
		if err != nil {
			t.Fatal(err)
		}
		rs.replicas = append(rs.replicas, s)
		t.Cleanup(func() {
			_ = s.Close()
			_ = cold.Close()
			_ = logs.Close()
		})
	}
	// Runs before the closes above: cut the links first, since a leader
	// that stops hands over leadership, and over an in-memory transport a
	// message to a stopped peer waits out its timeout instead of failing.
	t.Cleanup(func() {
		for _, tr := range trans {
			tr.DisconnectAll()
		}
	})
	return rs
}

// leader waits for a replica that leads and serves.
func (rs *replicaSet) leader() *Replica {
	rs.t.Helper()
	var l *Replica
	testwait.For(rs.t, 20*time.Second, "a serving leader", func() bool {
		for _, s := range rs.replicas {
			if s.ready() {
				l = s
				return true
			}
		}
		return false
	})
	return l
}

// tick sends one tick entry through the leader and waits until every
// replica has applied it.
func (rs *replicaSet) tick() {
	rs.t.Helper()
	l := rs.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.prop.propose(ctx, nil, true); err != nil {
		rs.t.Fatal(err)
	}
	index := l.raft.LastIndex()
	testwait.For(rs.t, 20*time.Second, fmt.Sprintf("every replica applying index %d", index), func() bool {
		for _, s := range rs.replicas {
			if fsmApplied(s) < index {
				return false
			}
		}
		return true
	})
}

// everyReplica checks cond on the status of every replica.
func (rs *replicaSet) everyReplica(what string, cond func(st Status) bool) {
	rs.t.Helper()
	for _, s := range rs.replicas {
		if st := s.Status(); !cond(st) {
			rs.t.Fatalf("replica %s: %s: hot %d, cold %d, stats %+v", s.cfg.NodeID, what, st.Keys, st.Cold.Keys, st.Stats)
		}
	}
}

// TestTieringAcrossReplicas: stamped time moved past the hot window demotes
// settled records to the cold tier of every replica at the same index; the
// cold tier answers DUPLICATE with the stored result; past the retention end
// every replica purges them.
func TestTieringAcrossReplicas(t *testing.T) {
	rs := openReplicaSet(t, 3)
	l := rs.leader()
	const n = 300
	retention := 7 * 24 * time.Hour
	for i := range n {
		got := propose(t, l, reserve(fmt.Sprint("k", i), time.Minute))[0]
		done := propose(t, l, keyspace.Command{Op: keyspace.OpComplete, Digest: digest.Key("t", []byte(fmt.Sprint("k", i))),
			Token: got.Token, Retention: retention.Milliseconds(), Result: []byte(fmt.Sprint("receipt-", i))})[0]
		if done.Outcome != keyspace.OutcomeOK {
			t.Fatalf("complete k%d: %v", i, done.Outcome)
		}
	}
	pending := propose(t, l, reserve("in-flight", time.Hour))[0]

	rs.clock.Add(24*time.Hour - time.Minute)
	rs.tick()
	rs.everyReplica("inside the hot window nothing is demoted", func(st Status) bool {
		return st.Keys == n+1 && st.Cold.Keys == 0
	})

	rs.clock.Add(2 * time.Minute)
	rs.tick()
	rs.everyReplica("past the hot window every settled record is cold", func(st Status) bool {
		return st.Keys == 1 && st.Cold.Keys == n && st.Stats.Demoted == n
	})

	dup := propose(t, l, reserve("k7", time.Minute))[0]
	if dup.Outcome != keyspace.OutcomeDuplicate || !dup.Cold || string(dup.Result) != "receipt-7" {
		t.Fatalf("reserve of a demoted key: %+v; want a cold DUPLICATE with its result", dup)
	}
	for _, s := range rs.replicas {
		g, err := s.Get(context.Background(), digest.Key("t", []byte("k9")), true)
		if err != nil || g.State != keyspace.Completed || !g.Cold || string(g.Result) != "receipt-9" {
			t.Fatalf("replica %s: local read of a demoted key: %+v, %v", s.cfg.NodeID, g, err)
		}
	}
	if g, err := l.Read(context.Background(), digest.Key("t", []byte("in-flight")), ReadOptions{ShowToken: true}); err != nil ||
		g.State != keyspace.Processing || g.Cold || g.Token != pending.Token {
		t.Fatalf("the record in flight: %+v, %v; want it PROCESSING in the hot tier", g, err)
	}

	rs.clock.Add(retention)
	rs.tick()
	rs.everyReplica("past the retention end every cold record is purged", func(st Status) bool {
		return st.Cold.Keys == 0 && st.Stats.Purged == n
	})
	if got := propose(t, l, reserve("k7", time.Minute))[0]; got.Outcome != keyspace.OutcomeAcquired {
		t.Fatalf("reserve after the purge: %v", got.Outcome)
	}
}

// TestTieringSurvivesSnapshotRestart: a replica restarted from a snapshot
// holding both tiers (and the log after it) answers from the cold tier as
// before.
func TestTieringSurvivesSnapshotRestart(t *testing.T) {
	dir := t.TempDir()
	clock := testclock.New()
	open := func() *Host {
		h, err := openStandalone(HostConfig{DataDir: dir, Shards: 1, Clock: clock.Now, TickInterval: time.Hour, NoSync: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := h.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := open()
	s := h.Replicas()[0]
	settle := func(key string) {
		got := propose(t, s, reserve(key, time.Minute))[0]
		propose(t, s, keyspace.Command{Op: keyspace.OpComplete, Digest: digest.Key("t", []byte(key)),
			Token: got.Token, Retention: (72 * time.Hour).Milliseconds(), Result: []byte(key)})
	}
	for i := range 50 {
		settle(fmt.Sprint("a", i))
	}
	clock.Add(25 * time.Hour)
	if _, err := s.prop.propose(context.Background(), nil, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// After the snapshot: more demoted records and a forget, from the log.
	for i := range 20 {
		settle(fmt.Sprint("b", i))
	}
	clock.Add(25 * time.Hour)
	if _, err := s.prop.propose(context.Background(), nil, true); err != nil {
		t.Fatal(err)
	}
	propose(t, s, keyspace.Command{Op: keyspace.OpForget, Digest: digest.Key("t", []byte("a3"))})
	before := s.Status()
	if before.Cold.Keys != 69 || before.Keys != 0 {
		t.Fatalf("before restart: hot %d, cold %d; want 0, 69", before.Keys, before.Cold.Keys)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}

	h = open()
	defer h.Close()
	s = h.Replicas()[0]
	if st := s.Status(); st.Cold.Keys != 69 || st.Keys != 0 {
		t.Fatalf("after restart: hot %d, cold %d; want 0, 69", st.Keys, st.Cold.Keys)
	}
	for _, key := range []string{"a0", "a49", "b0", "b19"} {
		got := propose(t, s, reserve(key, time.Minute))[0]
		if got.Outcome != keyspace.OutcomeDuplicate || !got.Cold || string(got.Result) != key {
			t.Fatalf("after restart, reserve %s: %+v", key, got)
		}
	}
	if got := propose(t, s, reserve("a3", time.Minute))[0]; got.Outcome != keyspace.OutcomeAcquired {
		t.Fatalf("after restart, the forgotten key: %v", got.Outcome)
	}
}
