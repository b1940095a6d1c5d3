package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/internal/gridtest"
)

// skewedClock is one node's clock: the test's fake clock plus an offset
// the test moves.
type skewedClock struct {
	base *fakeClock
	off  atomic.Int64 // ms
}

func (c *skewedClock) Now() time.Time {
	return c.base.Now().Add(time.Duration(c.off.Load()) * time.Millisecond)
}
func (c *skewedClock) Set(offset time.Duration) { c.off.Store(offset.Milliseconds()) }

// startSkewCluster starts three nodes on one fake clock; node 0's runs at
// an offset from it.
func startSkewCluster(t *testing.T) (*gridtest.Cluster, *fakeClock, *skewedClock) {
	clock := newFakeClock()
	skew := &skewedClock{base: clock}
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Replicas: 3, Shards: 4,
		Clock: func(i int) func() time.Time {
			if i == 0 {
				return skew.Now
			}
			return clock.Now
		},
	})
	return c, clock, skew
}

// moveLeader makes node i lead shard s, retrying the transfer Raft may
// refuse while an election or a catch-up runs.
func moveLeader(ctx context.Context, c *gridtest.Cluster, s, i int) error {
	var err error
	for ctx.Err() == nil {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = c.TransferLeader(tctx, s, i)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("shard %d to node %d: %w", s, i, err)
}

// TestClusterSkewedLeaderNeverGrantsASecondHolder: node 0's clock runs an
// hour behind, or an hour ahead, of the others'; it takes the leadership of
// a shard on which a lease was granted by another node. Behind: its stamps
// never run back (each is the max of the previous stamp and its clock), so
// the lease stays valid and Reserve answers BUSY until the lease ends by
// the stamps, and only then a second holder is granted, with a larger
// token. Ahead: the lease ends early by its stamps; the takeover's token is
// larger and the first holder's Complete is refused (LEASE_LOST), and when a
// normal clock leads again the stamps do not run back and the second lease
// holds. The grid's time is a fake clock the test moves, so every verdict
// is exact; the history is also checked by porcupine and CheckTokens.
// Then, on the same cluster, "random" runs the expiry workload while node
// 0's clock moves and leaderships move onto it (skewRandom).
func TestClusterSkewedLeaderNeverGrantsASecondHolder(t *testing.T) {
	c, clock, skew := startSkewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, c.Addrs()[1]+","+c.Addrs()[2]+","+c.Addrs()[0],
		client.WithRetryPolicy(client.RetryPolicy{Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := chaos.NewRecorder()
	exec := chaos.ClientExecutor{C: cl, NS: "chaos"}
	do := func(t *testing.T, in chaos.Input) chaos.Output {
		t.Helper()
		call := rec.Begin(0, in)
		out, err := exec.Do(ctx, in)
		if err != nil || out.Unknown {
			t.Fatalf("%v %s: %v (unknown outcome: %v)", in.Kind, in.Key, err, out.Cause)
		}
		call.End(out)
		return out
	}
	move := func(t *testing.T, key string, to int) {
		t.Helper()
		s := c.ShardOf("chaos", key)
		if err := moveLeader(ctx, c, s, to); err != nil {
			t.Fatal(err)
		}
		t.Logf("node %d leads shard %d of %s (node 0's clock at %+v)", to, s, key, time.Duration(skew.off.Load())*time.Millisecond)
	}
	const lease = 10_000 // ms
	reserve := func(key string) chaos.Input {
		return chaos.Input{Key: key, Kind: chaos.OpReserve, Lease: lease, MaxAttempts: 5, Retention: day}
	}
	settle := func(kind chaos.Kind, key string, tok uint64) chaos.Input {
		return chaos.Input{Key: key, Kind: kind, Token: tok, Retention: day, Result: "r"}
	}

	// The control leader moves each shard's leadership back to its
	// preferred leader every few seconds (cluster restoreLeaders): the keys
	// are on shards whose preferred leader is node 0, so that nothing moves
	// the leadership off node 0 while the test wants it there.
	keyOn := func(prefix string) string {
		m := c.Map()
		for i := 0; ; i++ {
			key := fmt.Sprintf("%s-%d", prefix, i)
			if m.ShardReplicas[c.ShardOf("chaos", key)][0] == cluster.NodeID(c.ID(0)) {
				return key
			}
		}
	}

	t.Run("behind", func(t *testing.T) {
		key := keyOn("skew-behind")
		move(t, key, 1)
		first := do(t, reserve(key))
		if first.Outcome != client.OutcomeAcquired {
			t.Fatalf("first reserve: %v", first.Outcome)
		}
		skew.Set(-time.Hour)
		move(t, key, 0)
		last := first
		busy := func(when string) {
			t.Helper()
			b := do(t, reserve(key))
			if b.Outcome != client.OutcomeBusy || b.Now < last.Now || b.Now >= first.Deadline {
				t.Fatalf("%s: reserve %v at stamp %d (previous stamp %d, lease until %d); want BUSY, stamps not going back",
					when, b.Outcome, b.Now, last.Now, first.Deadline)
			}
			last = b
		}
		busy("on a leader an hour behind")
		clock.Advance(lease / 2 * time.Millisecond)
		busy("half a lease later, on a leader an hour behind")
		skew.Set(0) // its clock is set right
		busy("clock set right, half a lease after the grant")
		clock.Advance((lease/2 + 1) * time.Millisecond)
		second := do(t, reserve(key))
		if second.Outcome != client.OutcomeAcquired || second.Attempt != 2 || second.Token <= first.Token || second.Now < first.Deadline {
			t.Fatalf("reserve after the lease ended by the stamps: %v attempt %d token %d at stamp %d; want ACQUIRED attempt 2, token above %d, stamp >= %d",
				second.Outcome, second.Attempt, second.Token, second.Now, first.Token, first.Deadline)
		}
		if late := do(t, settle(chaos.OpComplete, key, first.Token)); late.Outcome != client.OutcomeLeaseLost {
			t.Fatalf("the first holder's complete after the takeover: %v, want LEASE_LOST", late.Outcome)
		}
	})

	t.Run("ahead", func(t *testing.T) {
		key := keyOn("skew-ahead")
		skew.Set(0)
		move(t, key, 1)
		first := do(t, reserve(key))
		if first.Outcome != client.OutcomeAcquired {
			t.Fatalf("first reserve: %v", first.Outcome)
		}
		skew.Set(time.Hour)
		move(t, key, 0)
		second := do(t, reserve(key))
		if second.Outcome != client.OutcomeAcquired || second.Token <= first.Token || second.Now < first.Deadline {
			t.Fatalf("reserve on a leader an hour ahead: %v token %d at stamp %d; want ACQUIRED (the lease ended by its stamps), token above %d, stamp >= %d",
				second.Outcome, second.Token, second.Now, first.Token, first.Deadline)
		}
		if late := do(t, settle(chaos.OpComplete, key, first.Token)); late.Outcome != client.OutcomeLeaseLost {
			t.Fatalf("the first holder's complete after the takeover: %v, want LEASE_LOST (fencing)", late.Outcome)
		}
		// Back to a leader whose clock is an hour behind the stamps. (Should
		// the leadership go back to node 0 before the Reserve, the answer
		// must be the same; the log says who led.)
		move(t, key, 1)
		b := do(t, reserve(key))
		t.Logf("shard %d led by node(s) %v after the reserve", c.ShardOf("chaos", key), c.Leaders(c.ShardOf("chaos", key)))
		if b.Outcome != client.OutcomeBusy || b.Now < second.Now || b.Now >= second.Deadline {
			t.Fatalf("reserve on a normal leader after the one ahead: %v at stamp %d (previous %d, lease until %d); want BUSY, stamps not going back",
				b.Outcome, b.Now, second.Now, second.Deadline)
		}
		if ok := do(t, settle(chaos.OpComplete, key, second.Token)); ok.Outcome != client.OutcomeOK {
			t.Fatalf("the second holder's complete: %v, want OK", ok.Outcome)
		}
	})
	checkHistory(t, "skew", rec.Operations(), porcupine.Ok)

	// The randomized expiry workload on the same cluster. Stamps of the
	// shards node 0 led an hour ahead stay there: the clocks catch up first.
	skew.Set(0)
	clock.Advance(time.Hour + time.Minute)
	t.Run("random", func(t *testing.T) { skewRandom(t, c, clock, skew) })
}

// skewFaults move node 0's clock offset and the leadership of a random
// key's shard onto node 0 or off it, one fault at a time.
type skewFaults struct {
	c       *gridtest.Cluster
	skew    *skewedClock
	keys    int
	offsets []time.Duration
	made    atomic.Int64
}

func (f *skewFaults) fault(ctx context.Context, t *testing.T, rng *rand.Rand, g *gate, done *atomic.Int64) {
	key := fmt.Sprintf("k%d", rng.IntN(f.keys))
	s := f.c.ShardOf("chaos", key)
	off := f.offsets[rng.IntN(len(f.offsets))]
	to := 0
	if rng.IntN(3) == 0 {
		to = 1 + rng.IntN(2)
	}
	t.Logf("fault at op %d: node 0's clock at %+v, shard %d of %s to node %d", done.Load(), off, s, key, to)
	g.down()
	f.skew.Set(off)
	if err := moveLeader(ctx, f.c, s, to); err != nil && ctx.Err() == nil {
		t.Errorf("fault: %v", err)
	}
	g.raise()
	f.made.Add(1)
}

func (f *skewFaults) end(*testing.T) {}

// skewRandom runs the expiry workload (a fake grid clock the workers push
// forward, leases of 100 ms to 1 s) while node 0's clock is moved up to 3 s
// behind or ahead of the others' and shards' leaderships are moved onto it
// and off it: leases expire and are taken over at stamps that jump and
// freeze, and the history must stay linearizable with increasing tokens.
func skewRandom(t *testing.T, c *gridtest.Cluster, clock *fakeClock, skew *skewedClock) {
	w := workload{seed: firstSeed(t), workers: 6, clients: 2, keys: 3, ops: 500, faults: 3}
	if *long {
		w = workload{seed: w.seed, workers: 12, clients: 3, keys: 8, ops: 6000, faults: 16}
	}
	f := &skewFaults{c: c, skew: skew, keys: w.keys,
		offsets: []time.Duration{-3 * time.Second, -time.Second, 0, time.Second, 3 * time.Second}}
	w.clock, w.injector = clock, f
	ops := run(t, c, w)
	if got := f.made.Load(); got != int64(w.faults) {
		t.Errorf("%d faults made of %d", got, w.faults)
	}
	takeovers := 0
	for _, op := range ops {
		in, out := op.Input.(chaos.Input), op.Output.(chaos.Output)
		if in.Kind == chaos.OpReserve && out.Outcome == client.OutcomeAcquired && out.Attempt > 1 {
			takeovers++
		}
	}
	t.Logf("skew: %d takeovers", takeovers)
	if takeovers == 0 {
		t.Errorf("no lease was taken over: the run shows nothing about expiry under skew")
	}
	checkHistory(t, "skew-random", ops, porcupine.Ok)
}
