package system_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/gridtest"
)

var (
	membershipSeeds = flag.Int("membership.seeds", 0, "chaos: seeds of TestMembershipRandomized, from -chaos.seed on (default 2, 200 with -long)")
	membershipSteps = flag.Int("membership.steps", 0, "chaos: membership steps per seed (default 3, 6 with -long)")
)

// The membership runs: three nodes to start, three replicas, four shards,
// at most five nodes (the control group's size).
var memberLimits = planLimits{Start: 3, Replicas: 3, Max: 5}

const (
	// settleTimeout bounds the wait for a stable, balanced cluster after a
	// step.
	settleTimeout = 60 * time.Second
	// stepBudget is the history operations allowed per step, holdOps those
	// a fault waits for (or holdMax) before it is undone.
	stepBudget = 240
	holdOps    = 40
	holdMax    = 5 * time.Second
)

// TestMembershipRandomized runs seeded sequences of membership steps (join,
// drain, a drain that must be refused, kill, restart, a control-leader kill
// in the middle of a move, isolation of a node's Raft and gossip traffic)
// on an in-process cluster under load, and after each step, once the
// cluster has settled, checks that every shard's committed group is its
// map replica set with R voters, that every acknowledged Complete answers
// DUPLICATE, that callers of the default routing client saw no error but
// calls that gave up during a failover (logged), and that the recorded history is linearizable with increasing fencing
// tokens. A failure prints the seed, the steps and the cluster's state.
func TestMembershipRandomized(t *testing.T) {
	seeds, steps := 2, 3
	if *long {
		seeds, steps = 200, 6
	}
	if *membershipSeeds > 0 {
		seeds = *membershipSeeds
	}
	if *membershipSteps > 0 {
		steps = *membershipSteps
	}
	s := firstSeed(t)
	for i := range seeds {
		seed := s + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			plan := planSteps(seed, steps, memberLimits)
			t.Logf("steps:\n%s", formatPlan(plan, -1))
			newMemberRun(t, seed, plan).run()
		})
	}
}

// memberRun is one seed's run.
type memberRun struct {
	t    *testing.T
	seed uint64
	plan []step
	c    *gridtest.Cluster
	load *ackLoad
	hist *histLoad
	t0   time.Time

	mu       sync.Mutex
	journal  []string // what the run did, for a failure message
	illegal  bool     // the history failed a check: later checks would repeat it
	errsSeen int      // callers' errors reported so far
	gaveUp   int      // calls of the default client that gave up
	waiting  string   // the first known defect a check failed on (waitsFor)
}

func newMemberRun(t *testing.T, seed uint64, plan []step) *memberRun {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: memberLimits.Start, Replicas: memberLimits.Replicas, Shards: 4})
	r := &memberRun{t: t, seed: seed, plan: plan, c: c, t0: time.Now()}
	addrs := strings.Join(c.Addrs(), ",")
	dial := func(opts ...client.Option) *client.Client {
		cl, err := client.Dial(context.Background(), addrs, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	r.load = startAckLoad(dial(), dial(checkerRetry), 4)
	// The history's operations are each sent once (see
	// check.ClientExecutor): a resent Reserve would be two transitions.
	once := client.WithRetryPolicy(client.RetryPolicy{Attempts: 1})
	r.hist = startHistLoad(t, []*client.Client{dial(once), dial(once)}, seed, 6, 5)
	// Stopped before the cluster (cleanups run last first).
	t.Cleanup(func() {
		r.hist.stop()
		r.load.stop()
	})
	return r
}

func (r *memberRun) logf(format string, args ...any) {
	line := fmt.Sprintf("%v: ", time.Since(r.t0).Round(time.Millisecond)) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.journal = append(r.journal, line)
	r.mu.Unlock()
	r.t.Log(line)
}

// run runs the plan.
func (r *memberRun) run() {
	for k, st := range r.plan {
		r.logf("step %d/%d: %v", k+1, len(r.plan), st)
		r.hist.g.Down()
		r.hist.allow(stepBudget)
		if err := r.do(st); err != nil {
			r.fatal(k, "step", err)
		}
		if err := r.settle(); err != nil {
			r.fatal(k, "settle", err)
		}
		r.hist.g.Raise()
		r.check(k)
	}
	acked, _, busy := r.load.snapshot()
	r.logf("done: %d Completes acknowledged under load, %d Reserves BUSY after a resend, %d calls gave up", len(acked), busy, r.gaveUp)
	if r.waiting != "" {
		r.t.Skip(r.waiting)
	}
}

// settle waits until the cluster is stable (every running node has the
// map and serves; each shard's committed group is its map replica set,
// every member a voter) and balanced (the planner has nothing left to
// move: see balanced).
func (r *memberRun) settle() error {
	deadline := time.Now().Add(settleTimeout)
	for {
		err := r.c.AwaitStable(time.Until(deadline))
		if err != nil {
			return err
		}
		why := balanced(r.c.Map())
		if why == "" {
			// Balanced and stable in one look: the stability may have
			// been read before the last move.
			if err := r.c.AwaitStable(0); err == nil {
				return nil
			}
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not balanced after %v: %s", settleTimeout, why)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, within the deadline
	}
}

// balanced reports why m is not what the planner settles on ("" when it
// is): every shard with R replicas, none on a node that is not active, and
// replica counts of the active nodes within one of each other.
func balanced(m *topology.Map) string {
	count := map[topology.NodeID]int{}
	for id, info := range m.Nodes {
		if info.State == topology.NodeActive {
			count[id] = 0
		}
	}
	for s, set := range m.ShardReplicas {
		if len(set) != m.Replicas {
			return fmt.Sprintf("shard %d has %d replicas, want %d", s, len(set), m.Replicas)
		}
		for _, id := range set {
			if _, ok := count[id]; !ok {
				return fmt.Sprintf("shard %d has a replica on %s, which is %v", s, id, m.Nodes[id].State)
			}
			count[id]++
		}
	}
	lo, hi := -1, -1
	for _, n := range count {
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if hi-lo > 1 {
		return fmt.Sprintf("replicas per active node %v", count)
	}
	return ""
}

// replicaCounts is how many replicas each node of m holds.
func replicaCounts(m *topology.Map) map[topology.NodeID]int {
	count := map[topology.NodeID]int{}
	for _, set := range m.ShardReplicas {
		for _, id := range set {
			count[id]++
		}
	}
	return count
}

// check runs the checks after step k.
func (r *memberRun) check(k int) {
	if err := r.checkGroups(); err != nil {
		r.fail(k, "groups", err)
	}
	acked, errs, _ := r.load.snapshot()
	if err := r.load.checkDuplicates(acked); err != nil {
		r.fail(k, "duplicates", err)
	}
	fresh := errs[r.errsSeen:]
	r.errsSeen = len(errs)
	r.checkCallers(k, fresh)
	if r.illegal {
		return
	}
	dir := *vizDir
	if dir == "" {
		dir = r.t.TempDir()
	}
	st, err := r.hist.check(dir, fmt.Sprintf("membership-%d-step%d", r.seed, k+1))
	if err != nil {
		r.illegal = true
		r.fail(k, "history", err)
		return
	}
	r.logf("checked after step %d: replicas per node %v; %d Completes acknowledged, all DUPLICATE; history of %d operations (%d unknown) linearizable",
		k+1, replicaCounts(r.c.Map()), len(acked), st.Ops, st.Unknown)
}

// checkCallers reports the errors callers of the default routing client
// saw during step k. A call that gave up (unavailable, outcome unknown, or
// its deadline passed) is logged, not failed: whether a failover ends
// within the client's retry budget is a matter of time, which the
// failover benchmarks measure (on a starved machine an election can
// outlast it). Any other error fails check "callers".
func (r *memberRun) checkCallers(k int, errs []error) {
	var gaveUp, other []error
	for _, err := range errs {
		if errors.Is(err, client.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			gaveUp = append(gaveUp, err)
		} else {
			other = append(other, err)
		}
	}
	list := func(errs []error) string {
		var b strings.Builder
		for _, err := range errs[:min(5, len(errs))] {
			fmt.Fprintf(&b, "\n\t%v", err)
		}
		return b.String()
	}
	if len(gaveUp) > 0 {
		r.gaveUp += len(gaveUp)
		r.logf("%d calls of the default routing client gave up during step %d:%s", len(gaveUp), k+1, list(gaveUp))
	}
	if len(other) > 0 {
		r.fail(k, "callers", fmt.Errorf("%d calls of the default routing client failed during the step:%s", len(other), list(other)))
	}
}

// checkGroups checks that each shard's group, as its leader reports it,
// has exactly the map's replicas as voters, R of them, in a committed
// configuration (when the leader reports commitment).
func (r *memberRun) checkGroups() error {
	m := r.c.Map()
	for s, set := range m.ShardReplicas {
		g, err := r.leaderGroup(s)
		if err != nil {
			return err
		}
		want := slices.Clone(set)
		slices.Sort(want)
		switch {
		case g.Reported && !g.Committed:
			return fmt.Errorf("%v: configuration not committed", g)
		case len(g.Voters()) != len(g.Members):
			return fmt.Errorf("%v: a member is not a voter", g)
		case !slices.Equal(g.Voters(), want):
			return fmt.Errorf("%v: voters differ from the map's %v", g, set)
		case len(want) != m.Replicas:
			return fmt.Errorf("%v: %d voters, want R = %d", g, len(want), m.Replicas)
		}
	}
	return nil
}

// leaderGroup is shard s's group as its leader reports it. A leadership
// may be moving (the planner hands preferred leaderships back): the leader
// is asked again, for up to 15 s.
func (r *memberRun) leaderGroup(s int) (gridtest.Group, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		g, err := r.c.LeaderGroup(ctx, s)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return g, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fail reports a failed check after step k, with what is needed to replay
// it and to see why; the run goes on (the next checks still mean
// something). A check that waits for a defect's fix is logged instead,
// and the seed is skipped at its end (see waitsFor).
func (r *memberRun) fail(k int, check string, err error) {
	r.t.Helper()
	if why := waitsFor(check, r.plan[k]); why != "" {
		r.t.Logf("%s check after step %d failed, known: %s: %v\n%s", check, k+1, why, err, r.dump(k))
		if r.waiting == "" {
			r.waiting = why
		}
		return
	}
	r.t.Errorf("%s check after step %d failed: %v\n%s", check, k+1, err, r.dump(k))
}

// fatal reports a step or a settle that did not complete: the cluster is
// not in a state the next steps may start from. One that waits for a
// defect's fix skips the seed.
func (r *memberRun) fatal(k int, what string, err error) {
	r.t.Helper()
	msg := fmt.Sprintf("%s of step %d failed: %v\n%s", what, k+1, err, r.dump(k))
	if why := waitsFor(what, r.plan[k]); why != "" {
		r.t.Log(msg)
		r.t.Skip(why)
	}
	r.t.Fatal(msg)
}

func (r *memberRun) dump(k int) string {
	r.mu.Lock()
	journal := slices.Clone(r.journal[max(0, len(r.journal)-12):])
	r.mu.Unlock()
	return fmt.Sprintf("seed %d (replay: go test ./chaos -run 'TestMembershipRandomized' -chaos.seed %d -membership.seeds 1 -membership.steps %d -v)\nsteps:\n%s"+
		"last events:\n\t%s\ncluster:\n%s",
		r.seed, r.seed, len(r.plan), formatPlan(r.plan, k), strings.Join(journal, "\n\t"), r.c.Describe())
}
