package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/testclock"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/keyspace"
)

func openHost(t *testing.T, dir string, clock func() time.Time, reg prometheus.Registerer) *Host {
	t.Helper()
	h, err := openStandalone(HostConfig{
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
		Op: keyspace.OpReserve, Digest: digest.Key("t", []byte(key)),
		Lease: lease.Milliseconds(), Retention: time.Hour.Milliseconds(), MaxAttempts: 3,
	}
}

func propose(t *testing.T, s *Replica, cmds ...keyspace.Command) []keyspace.Result {
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
	s := h.Replicas()[0]
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
	clock := testclock.New()
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
// it (digest.TokenShard), before and after a snapshot and a restart, and
// they keep increasing.
func TestTokensNameTheirShard(t *testing.T) {
	dir := t.TempDir()
	clock := testclock.New()
	h := openHost(t, dir, clock.Now, nil)
	last := map[int]uint64{}
	grant := func(h *Host, round int) {
		t.Helper()
		for _, s := range h.Replicas() {
			id := int(s.ID())
			tok := propose(t, s, reserve(fmt.Sprintf("k%d-%d", id, round), time.Minute))[0].Token
			if got, ok := digest.TokenShard(tok, h.Settings().Shards); !ok || got != id || tok <= last[id] {
				t.Fatalf("round %d: shard %d granted token %d (names shard %d, %v; the last was %d)", round, id, tok, got, ok, last[id])
			}
			last[id] = tok
		}
	}
	grant(h, 0)
	for _, s := range h.Replicas() {
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

// TestStampNeverGoesBack: with the leader's clock set back an hour, stamps
// do not follow it (a read and a settle are stamped at the previous
// stamps), and no lease is granted or renewed while the clock is behind
// them by more than the maximum clock offset: Reserve and Extend are
// refused with ErrClockOffset, naming the lag. Once the clock is back
// within the bound, a lease is granted again, at the leader's own clock.
func TestStampNeverGoesBack(t *testing.T) {
	clock := testclock.New()
	reg := prometheus.NewRegistry()
	h := openHost(t, t.TempDir(), clock.Now, reg)
	defer h.Close()
	x := reserve("x", 10*time.Second)
	s := h.For(x.Digest)
	held := propose(t, s, x)[0]
	clock.Add(-time.Hour)
	ctx := context.Background()
	for _, cmd := range []keyspace.Command{reserve("x", 10*time.Second),
		{Op: keyspace.OpExtend, Digest: x.Digest, Token: held.Token, Lease: 10_000}} {
		_, err := s.Propose(ctx, []keyspace.Command{cmd})
		if !errors.Is(err, ErrClockOffset) || !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "1h0m0s behind") {
			t.Fatalf("%v on a leader an hour behind its stamps: %v; want ErrClockOffset (and ErrNotLeader) naming the lag", cmd.Op, err)
		}
	}
	got, err := s.Get(ctx, x.Digest, false)
	if err != nil || got.State != keyspace.Processing || got.Now != held.Now {
		t.Fatalf("read on a leader an hour behind: %+v, %v; want PROCESSING at the previous stamp %d", got, err, held.Now)
	}
	if v := testutil.ToFloat64(h.metrics.LeaseRefusals.WithLabelValues(ruleBehind)); v != 2 {
		t.Errorf("lease refusals (behind_stamps) = %v, want 2", v)
	}
	clock.Add(time.Hour + 11*time.Second)
	taken := propose(t, s, reserve("x", 10*time.Second))[0]
	if taken.Outcome != keyspace.OutcomeAcquired || taken.Attempt != 2 || taken.Token <= held.Token || taken.Now != clock.UnixMilli() {
		t.Fatalf("after lease end: %+v; want ACQUIRED attempt 2 at the leader's clock %d", taken, clock.UnixMilli())
	}
}

// TestSnapshotRestore: a Raft snapshot plus restart restores every record.
func TestSnapshotRestore(t *testing.T) {
	dir := t.TempDir()
	clock := testclock.New()
	h := openHost(t, dir, clock.Now, nil)
	s := h.Replicas()[1]
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
	s = h.Replicas()[1]
	for i, c := range cmds {
		got, err := s.Read(context.Background(), c.Digest, ReadOptions{ShowToken: true})
		if err != nil || got.State != keyspace.Processing || got.Token != granted[i].Token {
			t.Fatalf("record %d after restore: %+v %v", i, got, err)
		}
	}
	if got, _ := s.Read(context.Background(), reserve("late", 0).Digest, ReadOptions{StaleOK: true, ShowToken: true}); got.Token != after.Token {
		t.Errorf("entry after the snapshot not replayed: %+v", got)
	}
}

// TestTickReclaims: the leader's tick carries stamped time forward on an
// idle shard and the sweep reclaims expired records.
func TestTickReclaims(t *testing.T) {
	clock := testclock.New()
	h := openHost(t, t.TempDir(), clock.Now, nil)
	defer h.Close()
	s := h.Replicas()[0]
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
	if st.Keys != 0 || st.Stats.Reclaimed != 1 || st.Stamp != clock.UnixMilli() {
		t.Errorf("after tick: keys=%d reclaimed=%d stamp=%d (clock %d)", st.Keys, st.Stats.Reclaimed, st.Stamp, clock.UnixMilli())
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
	s := h.Replicas()[0]
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

// TestReadShowsTokenOnlyWhenAsked: a read, linearizable or stale, answers
// the record without its token; the operator view (ShowToken) includes it.
// The linearizable read carries the flag through the log.
func TestReadShowsTokenOnlyWhenAsked(t *testing.T) {
	h := openHost(t, t.TempDir(), testclock.New().Now, nil)
	defer h.Close()
	c := reserve("held", time.Minute)
	s := h.For(c.Digest)
	granted := propose(t, s, c)[0]
	ctx := context.Background()
	for _, o := range []ReadOptions{{}, {StaleOK: true}, {ShowToken: true}, {StaleOK: true, ShowToken: true}} {
		got, err := s.Read(ctx, c.Digest, o)
		want := uint64(0)
		if o.ShowToken {
			want = granted.Token
		}
		if err != nil || got.State != keyspace.Processing || got.Token != want {
			t.Errorf("Read %+v: %+v, %v; want PROCESSING with token %d", o, got, err, want)
		}
	}
	if got, err := s.Get(ctx, c.Digest, false); err != nil || got.Token != 0 {
		t.Errorf("Get: %+v, %v; want no token", got, err)
	}
}

// TestSnapshotAfterReplay: a replica restarted with a log tail of at least
// raft's SnapshotThreshold entries snapshots once it has applied it,
// without waiting for raft's own snapshot timer (2-4 min after start),
// which a node restarted more often never reaches: its next restart would
// replay the whole log again.
func TestSnapshotAfterReplay(t *testing.T) {
	dir := t.TempDir()
	clock := testclock.New()
	h := openHost(t, dir, clock.Now, nil)
	s := h.Replicas()[1]
	for i := range raft.DefaultConfig().SnapshotThreshold {
		propose(t, s, reserve(fmt.Sprintf("r%d", i), time.Minute))
	}
	last := s.raft.LastIndex()
	h.Close()

	h = openHost(t, dir, clock.Now, nil)
	defer h.Close()
	s = h.Replicas()[1]
	testwait.For(t, 20*time.Second, fmt.Sprintf("a snapshot at or after index %d", last), func() bool {
		i, err := strconv.ParseUint(s.raft.Stats()["last_snapshot_index"], 10, 64)
		return err == nil && i >= last
	})
}

// TestSnapshotBoundsTheTail: a replica that has spent SnapshotTail
// applying entries since its last snapshot takes one, whatever raft's own
// timer (2-4 min) and entry threshold (8192 entries) say: 4000 commands in
// 40 entries here, against a bound of a millisecond.
func TestSnapshotBoundsTheTail(t *testing.T) {
	dir := t.TempDir()
	clock := testclock.New()
	h, err := openStandalone(HostConfig{
		DataDir: dir, Shards: 1, Clock: clock.Now, TickInterval: time.Hour, NoSync: true,
		SnapshotTail: time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	s := h.Replicas()[0]
	for i := range 40 {
		cmds := make([]keyspace.Command, 100)
		for j := range cmds {
			cmds[j] = reserve(fmt.Sprintf("r%d-%d", i, j), time.Minute)
		}
		propose(t, s, cmds...)
	}
	if tail := s.fsm.tail(); tail < time.Millisecond {
		t.Fatalf("4000 commands took %v to apply: the bound of 1 ms proves nothing", tail)
	}
	testwait.For(t, 10*time.Second, "a snapshot after 1 ms of applies", func() bool {
		i, err := strconv.ParseUint(s.raft.Stats()["last_snapshot_index"], 10, 64)
		return err == nil && i > 0
	})
	if took := s.fsm.lastPersist(); took <= 0 {
		t.Errorf("the snapshot's write time is %v, want it measured", took)
	}
}
