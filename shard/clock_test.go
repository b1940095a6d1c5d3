package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/testclock"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/keyspace"
)

// stubPeers is a PeerClocks whose verdict and offsets the test sets.
type stubPeers struct {
	mu  sync.Mutex
	err error
	off map[string]time.Duration
}

func (p *stubPeers) Check() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *stubPeers) Offset(peer string) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.off[peer]
	return d, ok
}

func (p *stubPeers) set(err error, off map[string]time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err, p.off = err, off
}

// openTunedHost opens a host of two shards on clock, tuned by tune.
func openTunedHost(t *testing.T, clock func() time.Time, tune func(*HostConfig)) *Host {
	t.Helper()
	cfg := HostConfig{DataDir: t.TempDir(), Shards: 2, Clock: clock, TickInterval: time.Hour, NoSync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tune(&cfg)
	h, err := openStandalone(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestLeaseWaitsForTheClockToReachTheStamps: on a leader whose clock is
// behind the stamps by less than the maximum offset, a Reserve waits for
// the clock to reach them and is granted at the leader's own clock, never
// at the frozen previous stamp; a clock that does not get there within
// the maximum offset has its Reserve refused, saying so.
func TestLeaseWaitsForTheClockToReachTheStamps(t *testing.T) {
	t.Run("catches up", func(t *testing.T) {
		clock := testclock.New()
		// The bound is the longest the Reserve may wait: far longer
		// than the test takes to move the clock.
		h := openTunedHost(t, clock.Now, func(c *HostConfig) { c.MaxClockOffset = time.Minute })
		a := reserve("a", 10*time.Second)
		s := h.For(a.Digest)
		first := propose(t, s, a)[0]
		clock.Add(-100 * time.Millisecond)
		b := reserve("b", 10*time.Second)
		b.Digest = digest.Digest{Hi: a.Digest.Hi, Lo: a.Digest.Lo + 1} // the same shard
		if h.For(b.Digest) != s {
			t.Fatal("b is not on a's shard")
		}
		got := make(chan keyspace.Result, 1)
		go func() {
			res, err := s.Propose(context.Background(), []keyspace.Command{b})
			if err != nil {
				t.Error(err)
				res = []keyspace.Result{{}}
			}
			got <- res[0]
		}()
		testwait.For(t, 20*time.Second, "the Reserve to wait for the clock", func() bool {
			return testutil.ToFloat64(h.metrics.LeaseWaits) == 1
		})
		select {
		case r := <-got:
			t.Fatalf("Reserve answered %+v before the clock reached the stamps", r)
		default:
		}
		clock.Add(150 * time.Millisecond)
		r := <-got
		if r.Outcome != keyspace.OutcomeAcquired || r.Now != clock.UnixMilli() || r.Now <= first.Now {
			t.Fatalf("Reserve after the wait: %+v; want ACQUIRED at the leader's clock %d (previous stamp %d)", r, clock.UnixMilli(), first.Now)
		}
	})
	t.Run("does not", func(t *testing.T) {
		clock := testclock.New()
		h := openTunedHost(t, clock.Now, func(c *HostConfig) { c.MaxClockOffset = 50 * time.Millisecond })
		a := reserve("a", 10*time.Second)
		s := h.For(a.Digest)
		propose(t, s, a)
		clock.Add(-20 * time.Millisecond) // and it stays there
		_, err := s.Propose(context.Background(), []keyspace.Command{reserve("a", 10*time.Second)})
		if !errors.Is(err, ErrClockOffset) || !strings.Contains(err.Error(), "20ms behind") || !strings.Contains(err.Error(), "did not reach it within the maximum clock offset 50ms") {
			t.Fatalf("Reserve on a clock stuck 20 ms behind: %v; want ErrClockOffset saying it did not catch up", err)
		}
	})
}

// TestLeaseRefusedOutsideThePeersBound: a node whose clock is outside the
// bound of its peers (PeerClocks says so) refuses Reserve and Extend, and
// a request mixing them with a read, whole; it still serves settles and
// reads, stamped without its clock, so that a clock an hour ahead does not
// carry the shard's time off. Back inside, it grants at its clock again.
func TestLeaseRefusedOutsideThePeersBound(t *testing.T) {
	clock := testclock.New()
	peers := &stubPeers{}
	h := openTunedHost(t, clock.Now, func(c *HostConfig) { c.PeerClocks = peers })
	a := reserve("a", 10*time.Second)
	s := h.For(a.Digest)
	held := propose(t, s, a)[0]
	peers.set(fmt.Errorf("%w: this node's clock is 1h0m0s ahead of the median of its 2 peers", ErrClockOffset), nil)
	clock.Add(time.Hour)
	ctx := context.Background()
	get := keyspace.Command{Op: keyspace.OpGet, Digest: a.Digest}
	for _, cmds := range [][]keyspace.Command{
		{reserve("b", time.Second)},
		{{Op: keyspace.OpExtend, Digest: a.Digest, Token: held.Token, Lease: 10_000}},
		{get, reserve("b", time.Second)},
	} {
		_, err := s.Propose(ctx, cmds)
		if !errors.Is(err, ErrClockOffset) || !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "ahead of the median of its 2 peers") {
			t.Fatalf("%d commands with a lease on a node outside the bound: %v; want the peers' verdict", len(cmds), err)
		}
	}
	r := propose(t, s, get)[0]
	if r.State != keyspace.Processing || r.Now != held.Now {
		t.Fatalf("read on a node outside the bound: %+v; want PROCESSING at the previous stamp %d, not its clock", r, held.Now)
	}
	done := propose(t, s, keyspace.Command{Op: keyspace.OpComplete, Digest: a.Digest, Token: held.Token, Retention: time.Hour.Milliseconds()})[0]
	if done.Outcome != keyspace.OutcomeOK || done.Now != held.Now {
		t.Fatalf("complete on a node outside the bound: %+v; want OK at the previous stamp %d", done, held.Now)
	}
	if v := testutil.ToFloat64(h.metrics.LeaseRefusals.WithLabelValues(rulePeers)); v != 3 {
		t.Errorf("lease refusals (peer_offset) = %v, want 3", v)
	}
	peers.set(nil, nil)
	again := propose(t, s, reserve("b", time.Second))[0]
	if again.Outcome != keyspace.OutcomeAcquired || again.Now != clock.UnixMilli() {
		t.Fatalf("reserve back inside the bound: %+v; want ACQUIRED at the clock %d", again, clock.UnixMilli())
	}
}

// TestMaxClockOffsetLimits: the setting is refused outside 1 ms .. 1 h,
// naming the range.
func TestMaxClockOffsetLimits(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, time.Microsecond, 2 * time.Hour} {
		_, err := OpenHost(HostConfig{DataDir: t.TempDir(), MaxClockOffset: d})
		if err == nil || !strings.Contains(err.Error(), "out of range 1ms..1h0m0s") {
			t.Errorf("max clock offset %v: %v, want a refusal naming the range", d, err)
		}
	}
}

// TestClockRefusalHandsLeadershipOver, on three hosts over real sockets:
// a leader whose node is outside the bound of its peers hands its
// leadership to another voter. Then the host that made the shard's stamps
// goes, and the other two run 300 ms and 100 ms behind it (200 ms apart,
// within the bound of each other): the one 300 ms behind the stamps hands
// the leadership to the one 100 ms behind, which grants the expired
// lease's takeover at its own clock, and fencing refuses the first holder.
func TestClockRefusalHandsLeadershipOver(t *testing.T) {
	peers := []*stubPeers{{}, {}, {}}
	nh := tunedNetHosts(t, 3, false, func(c *HostConfig) {
		c.TickInterval = 20 * time.Millisecond
		var i int
		if _, err := fmt.Sscanf(c.NodeID, "n%d", &i); err != nil {
			t.Fatal(err)
		}
		c.PeerClocks = peers[i]
	})
	const id = 0
	at, _ := nh.leader(id)
	peers[at].set(fmt.Errorf("%w: this node's clock is off its peers'", ErrClockOffset), nil)
	testwait.For(t, 20*time.Second, "the leadership to leave the node outside the bound", func() bool {
		next, _ := nh.leader(id)
		return next != at
	})
	peers[at].set(nil, nil)

	const lease = time.Minute
	d := digest.Key("t", []byte("k"))
	for nh.hosts[0].ShardOf(d) != id {
		d.Lo++
	}
	reserveKey := func(s *Replica) (keyspace.Result, error) {
		res, err := s.Propose(context.Background(), []keyspace.Command{{Op: keyspace.OpReserve, Digest: d,
			Lease: lease.Milliseconds(), Retention: time.Hour.Milliseconds(), MaxAttempts: 5}})
		if err != nil {
			return keyspace.Result{}, err
		}
		return res[0], nil
	}
	at, l := nh.leader(id)
	first, err := reserveKey(l)
	if err != nil || first.Outcome != keyspace.OutcomeAcquired {
		t.Fatalf("first reserve: %+v, %v", first, err)
	}
	slow, fast := (at+1)%3, (at+2)%3
	nh.clocks[slow].Add(-300 * time.Millisecond)
	nh.clocks[fast].Add(-100 * time.Millisecond)
	id0, idSlow, idFast := string(nh.peers[at].ID), string(nh.peers[slow].ID), string(nh.peers[fast].ID)
	peers[slow].set(nil, map[string]time.Duration{idFast: 200 * time.Millisecond, id0: 300 * time.Millisecond})
	peers[fast].set(nil, map[string]time.Duration{idSlow: -200 * time.Millisecond, id0: 100 * time.Millisecond})
	nh.stop(at)
	if next, _ := nh.leader(id); next != slow {
		if err := nh.replica(next, id).TransferLeadership(context.Background(), idSlow, ""); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 20*time.Second, "the leadership to go from the host 300 ms behind the stamps to the one 100 ms behind", func() bool {
		next, _ := nh.leader(id)
		return next == fast
	})
	_, l = nh.leader(id)
	nh.clocks[fast].Add(lease + 100*time.Millisecond) // its clock reaches the deadline
	second, err := reserveKey(l)
	if err != nil || second.Outcome != keyspace.OutcomeAcquired || second.Token <= first.Token || second.Now != nh.clocks[fast].UnixMilli() {
		t.Fatalf("reserve after the lease: %+v, %v; want ACQUIRED at the leader's clock %d, token above %d",
			second, err, nh.clocks[fast].UnixMilli(), first.Token)
	}
	late := propose(t, l, keyspace.Command{Op: keyspace.OpComplete, Digest: d, Token: first.Token, Retention: time.Hour.Milliseconds()})[0]
	if late.Outcome != keyspace.OutcomeLeaseLost {
		t.Fatalf("the first holder's late complete: %v, want LEASE_LOST", late.Outcome)
	}
}
