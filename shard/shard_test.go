package shard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/l4xg/grid/keyspace"
)

// fakeClock is a settable clock for tests; time only moves when told.
type fakeClock struct{ ms atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ms.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	return c
}

func (c *fakeClock) Now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func (c *fakeClock) Set(t time.Time)     { c.ms.Store(t.UnixMilli()) }
func (c *fakeClock) Stamp() int64        { return c.ms.Load() }

func openHost(t *testing.T, dir string, clock func() time.Time, reg prometheus.Registerer) *Host {
	t.Helper()
	h, err := OpenHost(HostConfig{
		DataDir:      dir,
		Shards:       2,
		Clock:        clock,
		TickInterval: time.Hour, // tests send their own time
		NoSync:       true,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registry:     reg,
	})
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

func reserve(key string, lease time.Duration) keyspace.Command {
	return keyspace.Command{
		Op: keyspace.OpReserve, Digest: keyspace.KeyDigest("t", []byte(key)),
		Lease: lease.Milliseconds(), Retention: time.Hour.Milliseconds(), MaxAttempts: 3,
	}
}

func propose(t *testing.T, s *Shard, cmds ...keyspace.Command) []keyspace.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Propose(ctx, cmds)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestGroupCommit: many concurrent proposals share few log entries, and each
// caller gets exactly its own results.
func TestGroupCommit(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := openHost(t, t.TempDir(), time.Now, reg)
	defer h.Close()
	s := h.Shards()[0]
	before := s.raft.LastIndex()
	const callers = 400
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", i)
			res, err := s.Propose(context.Background(), []keyspace.Command{reserve(key, time.Minute)})
			switch {
			case err != nil:
				errs <- err
			case res[0].Outcome != keyspace.OutcomeAcquired || res[0].Attempt != 1:
				errs <- fmt.Errorf("%s: %v", key, res[0].Outcome)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	entries := s.raft.LastIndex() - before
	if entries >= callers {
		t.Errorf("%d proposals took %d log entries: no group commit", callers, entries)
	}
	if n := testutil.CollectAndCount(reg, "l4xg_grid_raft_entry_commands"); n == 0 {
		t.Error("entry size histogram not reported")
	}
	t.Logf("%d proposals in %d entries", callers, entries)
}

// TestTokensSurviveRestart: tokens keep increasing after a restart, and a
// settled record is still there.
func TestTokensSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	h := openHost(t, dir, clock.Now, nil)
	s := h.For(reserve("a", time.Second).Digest)
	first := propose(t, s, reserve("a", time.Second))[0]
	done := propose(t, s, keyspace.Command{Op: keyspace.OpComplete, Digest: reserve("a", 0).Digest, Token: first.Token, Retention: time.Hour.Milliseconds(), Result: []byte("r")})[0]
	if done.Outcome != keyspace.OutcomeOK {
		t.Fatalf("complete: %v", done.Outcome)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = openHost(t, dir, clock.Now, nil)
	defer h.Close()
	s = h.For(reserve("b", time.Second).Digest)
	second := propose(t, s, reserve("b", time.Second))[0]
	if second.Token <= first.Token {
		t.Errorf("token after restart %d <= token before %d", second.Token, first.Token)
	}
	got, err := h.For(reserve("a", 0).Digest).Get(context.Background(), reserve("a", 0).Digest, false)
	if err != nil || got.State != keyspace.Completed || string(got.Result) != "r" {
		t.Errorf("after restart: %+v %v", got, err)
	}
}

// TestTokensNameTheirShard: every shard of a host grants tokens that name
// it (keyspace.TokenShard), before and after a snapshot and a restart, and
// they keep increasing.
func TestTokensNameTheirShard(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	h := openHost(t, dir, clock.Now, nil)
	last := map[int]uint64{}
	grant := func(h *Host, round int) {
		t.Helper()
		for _, s := range h.Shards() {
			id := int(s.ID())
			tok := propose(t, s, reserve(fmt.Sprintf("k%d-%d", id, round), time.Minute))[0].Token
			if got, ok := keyspace.TokenShard(tok, h.Settings().Shards); !ok || got != id || tok <= last[id] {
				t.Fatalf("round %d: shard %d granted token %d (names shard %d, %v; the last was %d)", round, id, tok, got, ok, last[id])
			}
			last[id] = tok
		}
	}
	grant(h, 0)
	for _, s := range h.Shards() {
		if err := s.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = openHost(t, dir, clock.Now, nil)
	defer h.Close()
	grant(h, 1)
}

// TestStampNeverGoesBack: with the leader's clock set back, a lease granted
// earlier is still held until its deadline by the previous stamps.
func TestStampNeverGoesBack(t *testing.T) {
	clock := newFakeClock()
	h := openHost(t, t.TempDir(), clock.Now, nil)
	defer h.Close()
	s := h.Shards()[0]
	held := propose(t, s, reserve("x", 10*time.Second))[0]
	clock.Add(-time.Hour)
	again := propose(t, s, reserve("x", 10*time.Second))[0]
	if again.Outcome != keyspace.OutcomeBusy || again.Now < held.Now {
		t.Fatalf("after clock went back: %v at %d (first at %d)", again.Outcome, again.Now, held.Now)
	}
	clock.Add(time.Hour + 11*time.Second)
	taken := propose(t, s, reserve("x", 10*time.Second))[0]
	if taken.Outcome != keyspace.OutcomeAcquired || taken.Attempt != 2 || taken.Token <= held.Token {
		t.Fatalf("after lease end: %+v", taken)
	}
}

// TestSnapshotRestore: a Raft snapshot plus restart restores every record.
func TestSnapshotRestore(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	h := openHost(t, dir, clock.Now, nil)
	s := h.Shards()[1]
	var cmds []keyspace.Command
	for i := range 500 {
		cmds = append(cmds, reserve(fmt.Sprintf("s%d", i), time.Minute))
	}
	granted := propose(t, s, cmds...)
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	after := propose(t, s, reserve("late", time.Minute))[0]
	h.Close()

	h = openHost(t, dir, clock.Now, nil)
	defer h.Close()
	s = h.Shards()[1]
	for i, c := range cmds {
		got, err := s.Get(context.Background(), c.Digest, false)
		if err != nil || got.State != keyspace.Processing || got.Token != granted[i].Token {
			t.Fatalf("record %d after restore: %+v %v", i, got, err)
		}
	}
	if got, _ := s.Get(context.Background(), reserve("late", 0).Digest, true); got.Token != after.Token {
		t.Errorf("entry after the snapshot not replayed: %+v", got)
	}
}

// TestTickReclaims: the leader's tick carries stamped time forward on an
// idle shard and the sweep reclaims expired records.
func TestTickReclaims(t *testing.T) {
	clock := newFakeClock()
	h := openHost(t, t.TempDir(), clock.Now, nil)
	defer h.Close()
	s := h.Shards()[0]
	res := propose(t, s, reserve("tmp", time.Second))[0]
	propose(t, s, keyspace.Command{Op: keyspace.OpComplete, Digest: reserve("tmp", 0).Digest, Token: res.Token, Retention: 2000})
	if n := s.Status().Keys; n != 1 {
		t.Fatalf("keys = %d, want 1", n)
	}
	clock.Add(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.prop.propose(ctx, nil, true); err != nil {
		t.Fatal(err)
	}
	st := s.Status()
	if st.Keys != 0 || st.Stats.Reclaimed != 1 || st.Stamp != clock.Stamp() {
		t.Errorf("after tick: keys=%d reclaimed=%d stamp=%d (clock %d)", st.Keys, st.Stats.Reclaimed, st.Stamp, clock.Stamp())
	}
}

// TestHardSettingsChecked: reopening with another shard count is refused.
func TestHardSettingsChecked(t *testing.T) {
	dir := t.TempDir()
	h := openHost(t, dir, time.Now, nil)
	h.Close()
	_, err := OpenHost(HostConfig{DataDir: dir, Shards: 4, NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !errorsIs(err, ErrHardSettings) {
		t.Fatalf("reopen with 4 shards: %v, want ErrHardSettings", err)
	}
}

// TestProposeAfterClose: proposals racing with Close all return, none hangs.
func TestProposeAfterClose(t *testing.T) {
	h := openHost(t, t.TempDir(), time.Now, nil)
	s := h.Shards()[0]
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, _ = s.Propose(context.Background(), []keyspace.Command{reserve(fmt.Sprintf("c%d", i), time.Minute)})
		}()
	}
	close(start)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("proposals made around Close never returned")
	}
	if _, err := s.Propose(context.Background(), []keyspace.Command{reserve("late", time.Minute)}); !errorsIs(err, ErrClosed) {
		t.Fatalf("propose after close: %v, want ErrClosed", err)
	}
}
