package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/client"
)

// Namespaces of the two workloads.
const (
	registerNS = "chaos"
	appNS      = "chaos-app"
)

// sample is one operation of the app workload, for the timeline and the
// unavailability of each fault.
type sample struct {
	Start  time.Duration `json:"start"` // from the start of the load
	End    time.Duration `json:"end"`
	Kind   string        `json:"kind"`
	Worker int           `json:"worker"`
	Err    string        `json:"error,omitempty"`
}

// load runs the workloads until ctx ends.
type load struct {
	cfg   config
	start time.Time
	gate  *check.Gate
	inj   *injector

	rec      *check.Recorder
	regOps   atomic.Int64
	regUnk   atomic.Int64
	regErr   atomic.Value // the first error that says the test itself is wrong
	prefixes sync.Map     // key prefixes used, for the liveness check

	mu      sync.Mutex
	samples []sample
	acked   map[string]ackedAt // app keys whose Complete was acknowledged
	effects map[string]int     // app handler runs that returned nil, per key
	// afterAck are handler runs on a key whose Complete had been
	// acknowledged: a duplicate effect. afterAckRuns says when and how each
	// ran, against when and with which token the key was acknowledged.
	afterAck     []string
	afterAckRuns []string
	pending      map[string]bool // app keys reserved and not known settled
	appOK        atomic.Int64
	appErr       atomic.Int64
}

// ackedAt is when (since the start) and under which token a key's
// Complete was acknowledged; token 0 for a batch's.
type ackedAt struct {
	at    time.Duration
	token uint64
	how   string // the Process's sends, for a Process
}

func newLoad(cfg config, start time.Time, g *check.Gate, inj *injector) *load {
	return &load{cfg: cfg, start: start, gate: g, inj: inj, rec: check.NewRecorder(),
		acked: map[string]ackedAt{}, effects: map[string]int{}, pending: map[string]bool{}}
}

// prefix is the register workload's key prefix now: the keys change every
// epoch, so that each key's history stays small for the checker.
func (l *load) prefix() string {
	p := fmt.Sprintf("e%d-", int(time.Since(l.start)/l.cfg.Epoch))
	l.prefixes.Store(p, true)
	return p
}

// runRegister runs the register workload: workers making random
// operations on a few keys through clients that send each operation once,
// paced to cfg.Rate in all.
func (l *load) runRegister(ctx context.Context, addrs []string, wrap func(check.Executor) check.Executor) error {
	clients := make([]*client.Client, 2)
	for i := range clients {
		k := i % len(addrs)
		seeds := strings.Join(append(slices.Clone(addrs[k:]), addrs[:k]...), ",")
		c, err := client.Dial(ctx, seeds, client.WithRetryPolicy(client.RetryPolicy{Attempts: 1}))
		if err != nil {
			return err
		}
		defer c.Close()
		clients[i] = c
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / l.cfg.Rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := range l.cfg.Workers {
		wg.Go(func() {
			var exec check.Executor = check.ClientExecutor{C: clients[i%len(clients)], NS: registerNS}
			if wrap != nil {
				exec = wrap(exec)
			}
			w := check.NewWorker(i, l.cfg.Seed, l.cfg.Keys, check.Times{
				LeaseMin: leaseMin, LeaseSpan: leaseSpan, RetentionMin: retentionMin, RetentionSpan: retentionSpan,
				RetryMin: retryMin, RetrySpan: retrySpan})
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				w.Prefix = l.prefix()
				in := w.Next()
				call := l.rec.Begin(i, in)
				opCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				out, err := exec.Do(opCtx, in)
				cancel()
				l.regOps.Add(1)
				if err != nil {
					call.Unknown()
					l.regErr.CompareAndSwap(nil, fmt.Errorf("register worker %d: %v: %w", i, in.Kind, err))
					return
				}
				w.Saw(in, out)
				if out.Unknown {
					l.regUnk.Add(1)
					call.Note("%s", out.Cause)
					call.Unknown()
					l.gate.Wait(ctx)
					continue
				}
				call.End(out)
			}
		})
	}
	wg.Wait()
	if err, _ := l.regErr.Load().(error); err != nil {
		return err
	}
	return nil
}

// App workload choices, in percent.
const (
	appFresh     = 55 // Process of a new key
	appDuplicate = 15 // Process of a key already completed: a redelivery
	appFailing   = 10 // Process whose handler fails once, then a redelivery
	appCrash     = 8  // Reserve whose consumer dies (never settles), then a redelivery
	// the rest: a batch of appBatch keys reserved and completed in two calls
	appBatch = 10
)

// appWorker is one consumer of the app workload.
type appWorker struct {
	l      *load
	id     int
	c      *client.Client
	rng    *rand.Rand
	n      int
	due    []redelivery // keys to deliver again
	recent []string     // keys it saw completed
}

type redelivery struct {
	key string
	at  time.Time
}

// runApp runs the app workload: consumers through one client with default
// options, as an application would use it.
func (l *load) runApp(ctx context.Context, addrs []string) error {
	c, err := client.Dial(ctx, strings.Join(addrs, ","))
	if err != nil {
		return err
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := range l.cfg.AppWorkers {
		w := &appWorker{l: l, id: i, c: c, rng: rand.New(rand.NewPCG(l.cfg.Seed, 0xa99+uint64(i)))}
		wg.Go(func() { w.run(ctx) })
	}
	wg.Wait()
	return nil
}

func (w *appWorker) key() string {
	w.n++
	return fmt.Sprintf("a%d-%d", w.id, w.n)
}

func (w *appWorker) run(ctx context.Context) {
	for ctx.Err() == nil {
		if len(w.due) > 0 && time.Now().After(w.due[0].at) {
			r := w.due[0]
			w.due = w.due[1:]
			w.process(ctx, "redelivery", r.key, false)
			continue
		}
		p := w.rng.IntN(100)
		switch {
		case p < appFresh:
			w.process(ctx, "process", w.key(), false)
		case p < appFresh+appDuplicate && len(w.recent) > 0:
			w.process(ctx, "duplicate", w.recent[w.rng.IntN(len(w.recent))], false)
		case p < appFresh+appDuplicate+appFailing:
			w.process(ctx, "failing", w.key(), true)
		case p < appFresh+appDuplicate+appFailing+appCrash:
			w.crash(ctx)
		default:
			w.batch(ctx)
		}
	}
}

// record keeps a sample; a call cut by the end of the run is not one.
func (w *appWorker) record(ctx context.Context, kind string, start time.Time, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	l := w.l
	s := sample{Start: start.Sub(l.start), End: time.Since(l.start), Kind: kind, Worker: w.id}
	if err != nil {
		s.Err = err.Error()
		l.appErr.Add(1)
	} else {
		l.appOK.Add(1)
	}
	l.mu.Lock()
	l.samples = append(l.samples, s)
	l.mu.Unlock()
}

// process delivers key to a handler through Process; a failing handler
// fails its first run (the key is failed with a short retry delay and
// delivered again).
func (w *appWorker) process(ctx context.Context, kind, key string, failFirst bool) {
	l := w.l
	start := time.Now()
	l.mu.Lock()
	l.pending[key] = true
	l.mu.Unlock()
	handlerFailed := false
	res, err := w.c.Process(ctx, appNS, key, func(ctx context.Context, lease client.Lease) ([]byte, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if a, ok := l.acked[key]; ok {
			l.afterAck = append(l.afterAck, key)
			l.afterAckRuns = append(l.afterAckRuns, fmt.Sprintf("%s: %s delivery ran at %v under token %d (attempt %d, took over an expired lease: %v); acknowledged at %v under token %d (%s)",
				key, kind, time.Since(l.start).Round(time.Millisecond), lease.Token, lease.Attempt, lease.TookOverExpired, a.at.Round(time.Millisecond), a.token, a.how))
		}
		if failFirst {
			failFirst, handlerFailed = false, true
			return nil, client.RetryAfter(errors.New("handler failed"), 200*time.Millisecond)
		}
		l.effects[key]++
		return []byte("done"), nil
	}, client.WithLease(2*time.Second))
	var busy *client.BusyError
	switch {
	case err == nil:
		w.record(ctx, kind, start, nil)
		l.mu.Lock()
		if !res.Duplicate {
			l.acked[key] = ackedAt{time.Since(l.start), res.Token, fmt.Sprintf("attempt %d, reserve sends %d, settle sends %d, resent %v, replayed %v",
				res.Attempt, res.ReserveSends, res.SettleSends, res.Resent, res.Replayed)}
		}
		delete(l.pending, key)
		l.mu.Unlock()
		if len(w.recent) < 1000 {
			w.recent = append(w.recent, key)
		} else {
			w.recent[w.rng.IntN(len(w.recent))] = key
		}
	case errors.Is(err, client.ErrPoisoned):
		w.record(ctx, kind, start, nil)
		l.mu.Lock()
		delete(l.pending, key)
		l.mu.Unlock()
	case errors.As(err, &busy):
		w.record(ctx, kind, start, nil)
		w.redeliver(ctx, key, busy.RetryAfter)
	case handlerFailed:
		w.record(ctx, kind, start, nil)
		w.redeliver(ctx, key, res.RetryAfter)
	default:
		w.record(ctx, kind, start, err)
		w.redeliver(ctx, key, 500*time.Millisecond)
	}
}

// redeliver delivers key again after d (at least 100 ms).
func (w *appWorker) redeliver(ctx context.Context, key string, d time.Duration) {
	if ctx.Err() == nil {
		w.due = append(w.due, redelivery{key, time.Now().Add(max(d, 100*time.Millisecond))})
	}
}

// crash reserves a key with a short lease and never settles it, as a
// consumer that died; the key is delivered again after the lease.
func (w *appWorker) crash(ctx context.Context) {
	key := w.key()
	start := time.Now()
	w.l.mu.Lock()
	w.l.pending[key] = true
	w.l.mu.Unlock()
	_, err := w.c.Reserve(ctx, appNS, key, client.WithLease(500*time.Millisecond))
	w.record(ctx, "crash", start, err)
	w.due = append(w.due, redelivery{key, time.Now().Add(time.Second)})
}

// batch reserves appBatch new keys in one call and completes those granted
// in another.
func (w *appWorker) batch(ctx context.Context) {
	l := w.l
	ops := make([]client.Op, appBatch)
	keys := make([]string, appBatch)
	for i := range ops {
		keys[i] = w.key()
		ops[i] = client.ReserveOp(appNS, keys[i], client.WithLease(2*time.Second))
	}
	start := time.Now()
	res, errs, err := w.c.Batch(ctx, ops)
	if err == nil {
		var done []client.Op
		var doneKeys []string
		for i, r := range res {
			if errs[i] == nil && r.Outcome == client.OutcomeAcquired {
				done = append(done, client.CompleteOp(appNS, keys[i], r.Token))
				doneKeys = append(doneKeys, keys[i])
			}
		}
		if len(done) > 0 {
			var cres []client.Result
			cres, errs, err = w.c.Batch(ctx, done)
			if err == nil {
				l.mu.Lock()
				for i, r := range cres {
					if errs[i] == nil && r.Outcome == client.OutcomeOK {
						l.acked[doneKeys[i]] = ackedAt{at: time.Since(l.start)}
					}
				}
				l.mu.Unlock()
			}
		}
	}
	w.record(ctx, "batch", start, err)
}
