package system_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testclock"
)

var (
	long     = flag.Bool("long", false, "chaos: longer runs with more keys, clients, faults and seeds")
	vizDir   = flag.String("chaos.viz", "", "chaos: directory for the visualizations of failed checks (default: the test's temp dir, removed after the test)")
	procTest = flag.Bool("chaos.proc", false, "chaos: also run the kill -9 test against gridnode processes (on with -long)")
	seed0    = flag.Uint64("chaos.seed", 0, "chaos: first seed (default: from the time; the seed is logged)")
)

// workload is one randomized run.
type workload struct {
	seed    uint64
	workers int // concurrent callers
	clients int // client.Client instances they share (concurrent calls on one client are batched)
	keys    int
	ops     int // operations in all
	faults  int // faults spread over the run (Kill then Restart, or Restart)
	// forgets is the share (percent) of Forget among the operations on keys
	// a worker does not hold: it brings settled keys back (default 10).
	forgets int
	// clock, when set, is the grid's clock: workers push it forward and
	// leases, retry delays and retentions are short, so that they expire
	// during the run. Without it they are hours long and never expire.
	clock *testclock.Clock
	// wrap, when set, wraps the executor (deliberately broken grids).
	wrap func(check.Executor) check.Executor
	// injector makes the faults; nil: nodeFaults (kill and restart,
	// restart, or isolate a random node).
	injector faulter
}

// faulter makes the faults of a run, one at a time, on the injector
// goroutine. It must not call t.Fatal (that goroutine is not the test's):
// it reports with t.Errorf and leaves the grid up.
type faulter interface {
	// fault makes one fault. done counts the operations started so far,
	// so that a fault can last until the workload has made progress under
	// it; ctx ends when the workers have stopped. Workers that saw an
	// unknown outcome wait on g until it is raised.
	fault(ctx context.Context, t *testing.T, rng *rand.Rand, g *check.Gate, done *atomic.Int64)
	// end undoes whatever the last fault left in place.
	end(t *testing.T)
}

// nodeFaults are the faults of any Cluster: kill then restart, restart,
// or (when the Cluster is a Partitioner) isolate a node, healed at the next
// fault. Workers hold back while a node is down (see gate).
type nodeFaults struct {
	cl          check.Cluster
	partitioned bool
}

func (f *nodeFaults) fault(_ context.Context, t *testing.T, rng *rand.Rand, g *check.Gate, done *atomic.Int64) {
	inject(t, f.cl, rng, g, &f.partitioned, done.Load())
}

func (f *nodeFaults) end(*testing.T) {
	if f.partitioned {
		f.cl.(check.Partitioner).Heal()
	}
}

// singleNode is the Cluster of one in-process node (internal/gridtest).
type singleNode struct {
	n *gridtest.Node
}

var _ check.Cluster = (*singleNode)(nil)

func (s *singleNode) Addrs() []string { return []string{s.n.Addr()} }

// Kill stops the node without draining: gRPC connections are cut at once,
// so calls in flight lose their answers. (The shards still close cleanly: an
// in-process node cannot lose its unsynced writes as kill -9 does; see
// cmd/gridnode's crash test for that.)
func (s *singleNode) Kill(int) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = s.n.Stop(ctx) // gridtest's Close reports a failure at Restart or cleanup
}

// Restart starts the node again on its data directory and address (after
// stopping it cleanly when it runs: a stopped node's Stop is a no-op).
func (s *singleNode) Restart(int) { s.n.Restart() }

// run runs w against cl and returns the history.
func run(t *testing.T, cl check.Cluster, w workload) []porcupine.Operation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addrs := cl.Addrs()
	clients := make([]*client.Client, w.clients)
	for i := range clients {
		// Each recorded operation is sent at most once (see
		// check.ClientExecutor).
		opts := []client.Option{client.WithRetryPolicy(client.RetryPolicy{Attempts: 1})}
		seeds := addrs[0]
		if len(addrs) == 1 {
			// Calls wait for the connection instead of failing while
			// the node restarts: they were not sent, and need no open
			// end.
			opts = append(opts, client.WithDialOptions(grpc.WithDefaultCallOptions(grpc.WaitForReady(true))))
		} else {
			// A cluster client routes by the map, from any seed; each
			// client starts from another node. No WaitForReady: a call
			// to a node that is down must fail at once, so that the
			// router avoids the node and the worker (after an unknown
			// outcome) waits for the fault to end, instead of the call
			// hanging until its deadline.
			k := i % len(addrs)
			seeds = strings.Join(append(slices.Clone(addrs[k:]), addrs[:k]...), ",")
		}
		c, err := client.Dial(ctx, seeds, opts...)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
		defer c.Close()
	}

	rec := check.NewRecorder()
	g := check.NewGate()
	var done atomic.Int64
	faultAt := make(chan struct{}, w.faults)
	every := w.ops / (w.faults + 1)

	injectorCtx, stopInjector := context.WithCancel(ctx)
	injected := make(chan struct{})
	fi := w.injector
	if fi == nil {
		fi = &nodeFaults{cl: cl}
	}
	// made[k] is closed once fault k is over. The workers do not outrun
	// the faults: fault k starts at operation (k+1)*every, and operations
	// past (k+2)*every wait until it is over, so that a fast grid still
	// sees every fault, each with the workload running under it.
	made := make([]chan struct{}, w.faults)
	for k := range made {
		made[k] = make(chan struct{})
	}
	go func() { // the fault injector
		defer close(injected)
		defer fi.end(t)
		k := 0
		defer func() { // on an early end, nobody waits for the rest
			for ; k < len(made); k++ {
				close(made[k])
			}
		}()
		rng := rand.New(rand.NewPCG(w.seed, 0xfa))
		for ; k < w.faults; k++ {
			select {
			case <-faultAt:
			case <-injectorCtx.Done():
				return
			}
			if injectorCtx.Err() != nil {
				return
			}
			fi.fault(injectorCtx, t, rng, g, &done)
			close(made[k])
		}
	}()
	waitFaults := func(n int64) {
		if j := int(n/int64(every)) - 2; w.faults > 0 && j >= 0 {
			select {
			case <-made[min(j, w.faults-1)]:
			case <-ctx.Done():
			}
		}
	}
	var wg sync.WaitGroup
	for i := range w.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var exec check.Executor = check.ClientExecutor{C: clients[i%len(clients)], NS: "chaos"}
			if w.wrap != nil {
				exec = w.wrap(exec)
			}
			wk := newWorker(i, w)
			for {
				n := done.Add(1)
				if n > int64(w.ops) {
					return
				}
				if w.faults > 0 && n%int64(every) == 0 {
					select {
					case faultAt <- struct{}{}:
					default:
					}
				}
				waitFaults(n)
				if !wk.step(ctx, t, exec, rec, g) {
					return
				}
			}
		}()
	}
	wg.Wait()
	stopInjector()
	<-injected
	return rec.Operations()
}

// inject makes one fault on a random node: kill then restart, restart, or
// (when the Cluster is a Partitioner) isolate it; a partition is healed at
// the next fault. Workers hold back while a node is down (see gate).
func inject(t *testing.T, cl check.Cluster, rng *rand.Rand, g *check.Gate, partitioned *bool, at int64) {
	p, canPartition := cl.(check.Partitioner)
	if *partitioned {
		t.Logf("fault at op %d: heal", at)
		p.Heal()
		*partitioned = false
		return
	}
	n := len(cl.Addrs())
	i := rng.IntN(n)
	kinds := 2
	if canPartition && n > 1 {
		kinds = 3
	}
	switch rng.IntN(kinds) {
	case 0:
		t.Logf("fault at op %d: kill and restart node %d", at, i)
		g.Down()
		cl.Kill(i)
		cl.Restart(i)
		g.Raise()
	case 1:
		t.Logf("fault at op %d: restart node %d", at, i)
		g.Down()
		cl.Restart(i)
		g.Raise()
	default:
		t.Logf("fault at op %d: isolate node %d", at, i)
		var rest []int
		for j := range n {
			if j != i {
				rest = append(rest, j)
			}
		}
		p.Partition(rest)
		*partitioned = true
	}
}

// worker is one caller of the workload (check.Worker) on the test's
// clock: with a fake clock, leases, retry delays and retentions are short,
// so that they expire during the run; without it they are hours long and
// never expire.
type worker struct {
	*check.Worker
	w workload
}

func newWorker(id int, w workload) *worker {
	t := check.Times{LeaseMin: hour / 2, LeaseSpan: hour / 2, RetentionMin: day, RetryMin: hour}
	if w.clock != nil {
		t = check.Times{LeaseMin: 100, LeaseSpan: 900, RetentionMin: 500, RetentionSpan: 1500, RetryMin: 100, RetrySpan: 500}
	}
	cw := check.NewWorker(id, w.seed, w.keys, t)
	cw.Forgets = w.forgets
	return &worker{Worker: cw, w: w}
}

// step runs one operation and records it; false stops the worker.
func (wk *worker) step(ctx context.Context, t *testing.T, exec check.Executor, rec *check.Recorder, g *check.Gate) bool {
	if c := wk.w.clock; c != nil {
		c.Add(time.Duration(wk.Rand().IntN(150)) * time.Millisecond)
	}
	in := wk.Next()
	call := rec.Begin(wk.ID, in)
	opCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	out, err := exec.Do(opCtx, in)
	cancel()
	if err != nil {
		call.Unknown()
		t.Errorf("worker %d: %v: %v", wk.ID, in.Kind, err)
		return false
	}
	wk.Saw(in, out)
	if out.Unknown {
		call.Note("%s", out.Cause)
		call.Unknown()
		g.Wait(ctx)
		return ctx.Err() == nil
	}
	call.End(out)
	return true
}

// checkHistory checks ops and fails the test unless the verdict is want.
func checkHistory(t *testing.T, name string, ops []porcupine.Operation, want porcupine.CheckResult) {
	t.Helper()
	dir := *vizDir
	if dir == "" && want == porcupine.Ok {
		// An expected failure gets a visualization only with -chaos.viz:
		// porcupine's verbose pass, which computes it, can take up to its
		// timeout on a history with many open-ended operations.
		dir = t.TempDir()
	}
	st := check.Count(ops)
	if err := check.FencingTokens(ops); err != nil && want == porcupine.Ok {
		t.Errorf("%s: %v", name, err)
	}
	v, err := check.Linearizable(ops, 60*time.Second, dir, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d operations on %d keys, %d with unknown outcome, %d answered from the cold tier; check %v in %v",
		name, st.Ops, st.Keys, st.Unknown, st.Cold, v.Result, v.Elapsed.Round(time.Millisecond))
	t.Logf("%s: outcomes %v", name, st.ByOutcome)
	if v.Visualization != "" {
		t.Logf("%s: visualization: %s", name, v.Visualization)
	}
	switch {
	case v.Result == want:
	case v.Result == porcupine.Unknown:
		t.Fatalf("%s: the checker timed out: neither a pass nor a failure; investigate (smaller history, fewer open-ended operations)", name)
	default:
		t.Fatalf("%s: %v, want %v", name, v.Result, want)
	}
}

func firstSeed(t *testing.T) uint64 {
	s := *seed0
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed %d)", s, s)
	return s
}

// TestLinearizableUnderRestarts: concurrent random operations on a few keys
// against a real node that is killed and restarted during the run; every
// history is linearizable, fencing tokens increase per key (the model
// checks it), and acknowledged writes survive the restarts.
func TestLinearizableUnderRestarts(t *testing.T) {
	seeds, w := 1, workload{workers: 8, clients: 2, keys: 5, ops: 1500, faults: 3}
	if *long {
		seeds, w = 5, workload{workers: 16, clients: 4, keys: 20, ops: 20000, faults: 12}
	}
	s := firstSeed(t)
	for i := range seeds {
		w.seed = s + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", w.seed), func(t *testing.T) {
			cl := &singleNode{n: gridtest.Start(t, gridtest.Options{Shards: 2})}
			ops := run(t, cl, w)
			checkHistory(t, "restarts", ops, porcupine.Ok)
		})
	}
}

// TestLinearizableWithExpiry: the same with a grid clock that the workers
// push forward, short leases, retry delays and retentions, so that leases
// expire and are taken over, failed keys are retried and poisoned, and
// settled keys come back ABSENT: the model's time rules checked against the
// grid's.
func TestLinearizableWithExpiry(t *testing.T) {
	seeds, w := 1, workload{workers: 6, clients: 2, keys: 3, ops: 1000}
	if *long {
		seeds, w = 5, workload{workers: 12, clients: 3, keys: 10, ops: 10000, faults: 6}
	}
	s := firstSeed(t)
	for i := range seeds {
		w.seed = s + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", w.seed), func(t *testing.T) {
			w.clock = testclock.At(time.Now())
			cl := &singleNode{n: gridtest.Start(t, gridtest.Options{Shards: 2, Clock: w.clock.Now})}
			ops := run(t, cl, w)
			st := check.Count(ops)
			takeovers := 0
			for _, op := range ops {
				in, out := op.Input.(check.Input), op.Output.(check.Output)
				if in.Kind == check.KindReserve && out.Outcome == client.OutcomeAcquired && out.Attempt > 1 {
					takeovers++
				}
			}
			t.Logf("expiry: %d takeovers (ACQUIRED with attempt > 1)", takeovers)
			if takeovers == 0 || st.ByOutcome["reserve BUSY"] == 0 {
				t.Errorf("workload too thin to mean anything: %d takeovers, %v", takeovers, st.ByOutcome)
			}
			checkHistory(t, "expiry", ops, porcupine.Ok)
		})
	}
}
