package system_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
)

// dialNodes dials one client per node of c, without routing.
func dialNodes(t *testing.T, c *gridtest.Cluster) []*client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*client.Client
	for _, addr := range c.Addrs() {
		cl, err := client.Dial(ctx, addr, client.WithoutRouting(), client.WithRetryPolicy(client.RetryPolicy{Attempts: 1}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		out = append(out, cl)
	}
	return out
}

// cutOff is a fault schedule of one fault: the node leading the shard of
// key k0 is cut off from the others (the old leader partitioned away)
// until the others have elected a new leader for that shard and the
// workload has run hold operations more; then every link heals.
type cutOff struct {
	c    *clusterFaults
	node atomic.Int64 // the node cut off, -1 when none
}

func (f *cutOff) fault(ctx context.Context, t *testing.T, rng *rand.Rand, g *check.Gate, done *atomic.Int64) {
	c := f.c.c
	s := c.ShardOf("chaos", "k0")
	ls := c.Leaders(s)
	if len(ls) == 0 {
		t.Errorf("shard %d of k0 has no leader", s)
		return
	}
	l := ls[0]
	var rest []int
	for i := range c.Addrs() {
		if i != l {
			rest = append(rest, i)
		}
	}
	t.Logf("%v: fault at op %d: node %d (leads shard %d of k0) cut off", f.c.since(), done.Load(), l, s)
	g.Down()
	c.Partition(rest)
	f.node.Store(int64(l))
	f.c.holdOn(ctx, t, g, done, f.c.ledElsewhere(s, l))
	t.Logf("%v: healed at op %d", f.c.since(), done.Load())
	f.node.Store(-1)
	c.Heal()
	if err := c.AwaitStable(60 * time.Second); err != nil {
		t.Error(err)
	}
	t.Logf("%v: stable", f.c.since())
	f.c.made.Add(1)
}

func (f *cutOff) end(*testing.T) { f.c.c.Heal() }

// TestClusterCheckerCatchesFollowerReads: the cluster workload with Gets
// answered by followers without ReadIndex, while the old leader of a shard
// is cut off: porcupine must answer Illegal (the reads from the cut-off
// node miss the writes the majority acknowledged meanwhile). With -long a
// control run has the same schedule with the grid's own Gets and must pass,
// so the verdict is the broken read's doing, not the schedule's (in CI the
// cluster tests stand for it: the same faults, linearizable).
func TestClusterCheckerCatchesFollowerReads(t *testing.T) {
	s := firstSeed(t)
	runs := []bool{true}
	if *long {
		runs = append(runs, false)
	}
	for _, broken := range runs {
		name := "follower-reads"
		if !broken {
			name = "control"
		}
		t.Run(name, func(t *testing.T) {
			c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Replicas: 3, Shards: 4})
			f := &cutOff{c: newClusterFaults(c, 5)}
			f.c.hold = 150
			f.node.Store(-1)
			w := workload{seed: s, workers: 8, clients: 2, keys: 5, ops: 500, faults: 1, injector: f}
			if broken {
				nodes := dialNodes(t, c)
				var mu sync.Mutex
				rng := rand.New(rand.NewPCG(s, 0xbad))
				// The cut-off node while there is one; otherwise a
				// random replica of the key's shard that does not lead
				// it.
				reader := func(key string) int {
					if n := f.node.Load(); n >= 0 {
						return int(n)
					}
					sh := c.ShardOf("chaos", key)
					ls := c.Leaders(sh)
					reps := slices.DeleteFunc(c.Replicas(sh), func(i int) bool { return slices.Contains(ls, i) })
					if len(reps) == 0 {
						reps = c.Replicas(sh)
					}
					mu.Lock()
					defer mu.Unlock()
					return reps[rng.IntN(len(reps))]
				}
				w.wrap = func(e check.Executor) check.Executor {
					return check.FollowerReads(e, "chaos", nodes, reader)
				}
			}
			ops := run(t, c, w)
			t.Logf("%v: run over", f.c.since())
			if f.c.made.Load() != 1 {
				t.Fatalf("the cut-off was not made: the run proves nothing")
			}
			want := porcupine.Ok
			if broken {
				want = porcupine.Illegal
			}
			checkHistory(t, name, ops, want)
		})
	}
}
