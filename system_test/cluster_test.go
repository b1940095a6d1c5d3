package system_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// The in-process cluster is what the workload runs against when a test
// wants Raft groups of several replicas, partitions and leader changes.
var (
	_ check.Cluster     = (*gridtest.Cluster)(nil)
	_ check.Partitioner = (*gridtest.Cluster)(nil)
)

// faultKind is one kind of fault of clusterFaults.
type faultKind uint8

const (
	// isolateLeader cuts the node leading the shard of a random key off
	// every other node: it keeps believing it leads until its lease ends,
	// while the others elect.
	isolateLeader faultKind = iota
	// splitMinority cuts the nodes into a minority of (n-1)/2 nodes, one of
	// them the leader of a random key's shard, and a majority. On three
	// nodes the minority is one random node, a follower as often as not.
	splitMinority
	// killLeader kills the node leading the shard of a random key (no hand
	// over) and starts it again once another leads the shard.
	killLeader
	// pauseLeader stalls the Raft traffic of the node leading the shard of
	// a random key (a stopped process), then lets it go on: its held
	// messages arrive late.
	pauseLeader
	// fullRestart kills every node, then starts them all: the history
	// carries on across a full-cluster crash (tokens and acknowledged
	// records must survive it).
	fullRestart
	numFaultKinds
)

var faultNames = [...]string{"isolate-leader", "split-minority", "kill-leader", "pause-leader", "full-restart"}

func (k faultKind) String() string { return faultNames[k] }

// clusterFaults are the faults of an in-process cluster. Each fault lasts
// until the workload has made progress under it (hold operations started,
// and the shard it hit led by another node), or maxHold; it is then undone,
// and the next waits until the cluster is stable again, so faults never
// pile up. The kinds come in a shuffled cycle: a run of numFaultKinds
// faults has one of each.
type clusterFaults struct {
	c       *gridtest.Cluster
	ns      string
	keys    int
	hold    int64
	maxHold time.Duration

	cycle  []faultKind
	made   atomic.Int64 // faults made and undone
	failed bool         // a fault could not be undone: make no more
	t0     time.Time    // for the log
}

func newClusterFaults(c *gridtest.Cluster, keys int) *clusterFaults {
	return &clusterFaults{c: c, ns: "chaos", keys: keys, hold: 60, maxHold: 5 * time.Second, t0: time.Now()}
}

func (f *clusterFaults) since() time.Duration { return time.Since(f.t0).Round(time.Millisecond) }

func (f *clusterFaults) next(rng *rand.Rand) faultKind {
	if len(f.cycle) == 0 {
		for k := range numFaultKinds {
			f.cycle = append(f.cycle, k)
		}
		rng.Shuffle(len(f.cycle), func(i, j int) { f.cycle[i], f.cycle[j] = f.cycle[j], f.cycle[i] })
	}
	k := f.cycle[0]
	f.cycle = f.cycle[1:]
	return k
}

// target picks a random key's shard and the node leading it (a random
// replica of it when none leads right now).
func (f *clusterFaults) target(rng *rand.Rand) (key string, s, leader int) {
	key = fmt.Sprintf("k%d", rng.IntN(f.keys))
	s = f.c.ShardOf(f.ns, key)
	if ls := f.c.Leaders(s); len(ls) > 0 {
		return key, s, ls[rng.IntN(len(ls))]
	}
	reps := f.c.Replicas(s)
	return key, s, reps[rng.IntN(len(reps))]
}

// ledElsewhere is the condition that shard s is led by a node other than
// gone: the fault has forced an election.
func (f *clusterFaults) ledElsewhere(s, gone int) func() bool {
	return func() bool {
		return slices.ContainsFunc(f.c.Leaders(s), func(i int) bool { return i != gone })
	}
}

// holdOn lets the workload run under a fault: it waits until cond (if
// any) holds, typically that another node leads the shard the fault hit,
// then raises g (workers that saw an unknown outcome carry on against the
// new leader), then waits until f.hold more operations have started. Each
// wait is bounded by maxHold, and both end with ctx.
func (f *clusterFaults) holdOn(ctx context.Context, t *testing.T, g *check.Gate, done *atomic.Int64, cond func() bool) {
	start := time.Now()
	if cond != nil {
		testwait.Holds(f.maxHold, func() bool { return cond() || ctx.Err() != nil })
		if cond() {
			t.Logf("%v: another node leads the shard after %v", f.since(), time.Since(start).Round(time.Millisecond))
		} else {
			t.Logf("%v: no other node leads the shard after %v", f.since(), time.Since(start).Round(time.Millisecond))
		}
	}
	g.Raise()
	from := done.Load()
	testwait.Holds(f.maxHold, func() bool { return done.Load()-from >= f.hold || ctx.Err() != nil })
}

func (f *clusterFaults) fault(ctx context.Context, t *testing.T, rng *rand.Rand, g *check.Gate, done *atomic.Int64) {
	if f.failed {
		return
	}
	fail := func(err error) {
		t.Error(err)
		f.failed = true
	}
	n := len(f.c.Addrs())
	kind := f.next(rng)
	key, s, l := f.target(rng)
	at, began := done.Load(), time.Now()
	g.Down()
	switch kind {
	case isolateLeader:
		t.Logf("%v: fault at op %d: %v: node %d (leads shard %d of %s) cut off", f.since(), at, kind, l, s, key)
		var rest []int
		for j := range n {
			if j != l {
				rest = append(rest, j)
			}
		}
		f.c.Partition(rest)
		f.holdOn(ctx, t, g, done, f.ledElsewhere(s, l))
		f.c.Heal()
	case splitMinority:
		perm := rng.Perm(n)
		if n > 3 { // the leader in the minority
			perm = append([]int{l}, slices.DeleteFunc(perm, func(i int) bool { return i == l })...)
		}
		minority, majority := perm[:(n-1)/2], perm[(n-1)/2:]
		t.Logf("%v: fault at op %d: %v: %v | %v (node %d leads shard %d of %s)", f.since(), at, kind, minority, majority, l, s, key)
		f.c.Partition(minority, majority)
		// The majority elects a new leader of the shard if it holds a
		// quorum of its replicas; otherwise the shard waits for the heal
		// (the other shards go on).
		var cond func() bool
		reps := f.c.Replicas(s)
		inMajority := 0
		for _, r := range reps {
			if slices.Contains(majority, r) {
				inMajority++
			}
		}
		if slices.Contains(minority, l) && inMajority > len(reps)/2 {
			cond = f.ledElsewhere(s, l)
		}
		f.holdOn(ctx, t, g, done, cond)
		f.c.Heal()
	case killLeader:
		t.Logf("%v: fault at op %d: %v: node %d (leads shard %d of %s) killed", f.since(), at, kind, l, s, key)
		f.c.Kill(l)
		f.holdOn(ctx, t, g, done, f.ledElsewhere(s, l))
		if err := f.c.StartNodes(l); err != nil {
			fail(fmt.Errorf("after %v: %w", kind, err))
		}
	case pauseLeader:
		t.Logf("%v: fault at op %d: %v: node %d (leads shard %d of %s) paused", f.since(), at, kind, l, s, key)
		f.c.Pause(l)
		f.holdOn(ctx, t, g, done, f.ledElsewhere(s, l))
		f.c.Resume(l)
	case fullRestart:
		t.Logf("%v: fault at op %d: %v: every node killed, then started", f.since(), at, kind)
		all := make([]int, n)
		for i := range all {
			all[i] = i
			f.c.Kill(i)
		}
		if err := f.c.StartNodes(all...); err != nil {
			fail(fmt.Errorf("after %v: %w", kind, err))
		}
	}
	undone := done.Load()
	if err := f.c.AwaitStable(60 * time.Second); err != nil {
		fail(fmt.Errorf("after %v: %w", kind, err))
	}
	g.Raise()
	f.made.Add(1)
	t.Logf("%v: fault %v: %d operations under it, undone and stable after %v", f.since(), kind, undone-at, time.Since(began).Round(time.Millisecond))
}

func (f *clusterFaults) end(*testing.T) { f.c.Heal() }

// clusterRun runs w against a new cluster of the given size (3 replicas per
// shard, 4 shards) under clusterFaults, checks the history, and asserts
// that every fault was made.
func clusterRun(t *testing.T, nodes int, w workload) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: nodes, Replicas: 3, Shards: 4})
	f := newClusterFaults(c, w.keys)
	w.injector = f
	start := time.Now()
	ops := run(t, c, w)
	t.Logf("%d operations, %d faults in %v", len(ops), f.made.Load(), time.Since(start).Round(time.Millisecond))
	if got := f.made.Load(); got != int64(w.faults) {
		t.Errorf("%d faults made of %d: the run ended before them", got, w.faults)
	}
	checkHistory(t, fmt.Sprintf("cluster%d", nodes), ops, porcupine.Ok)
}

// clusterWorkload is the workload of the cluster tests: short in CI (one of
// each fault kind), longer with -long.
func clusterWorkload() (seeds int, w workload) {
	if *long {
		return 3, workload{workers: 12, clients: 3, keys: 10, ops: 8000, faults: 3 * int(numFaultKinds)}
	}
	return 1, workload{workers: 8, clients: 2, keys: 5, ops: 1000, faults: int(numFaultKinds)}
}

// TestClusterLinearizable3 runs the randomized workload against three nodes
// while leaders are cut off, minorities split away, leaders killed and
// paused, and the whole cluster crashes and restarts: every history is
// linearizable (porcupine) and fencing tokens increase per key
// (CheckTokens), across leader changes and the full restart.
func TestClusterLinearizable3(t *testing.T) { clusterTest(t, 3) }

// TestClusterLinearizable5 is the same on five nodes, where a shard's three
// replicas are on three of them and a minority split can strand a leader
// with one other node.
func TestClusterLinearizable5(t *testing.T) { clusterTest(t, 5) }

func clusterTest(t *testing.T, nodes int) {
	seeds, w := clusterWorkload()
	s := firstSeed(t)
	for i := range seeds {
		w.seed = s + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", w.seed), func(t *testing.T) { clusterRun(t, nodes, w) })
	}
}
