package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/l4xg/grid/bench/internal/stats"
)

// The workloads, in the order they run.
const (
	ReserveUnique = "reserve-unique"
	ReserveDup    = "reserve-dup"
	Lifecycle     = "lifecycle"
	Batch         = "batch"
	Fill          = "fill"
)

// Names lists every workload.
var Names = []string{ReserveUnique, ReserveDup, Lifecycle, Batch, Fill}

const (
	// FillLease is the lease of the keys fill loads: long enough that none
	// expires before the memory is read (the grid's largest lease).
	FillLease = time.Hour
	// fillChunk is the keys per call while filling.
	fillChunk = 1000
	// heldKeys is how many of its reserved keys a reserve-dup worker keeps
	// to re-reserve.
	heldKeys = 1024
)

// Errors a workload reports when a target breaks the semantics.
var (
	ErrNewKeyRefused   = errors.New("reserve of a new key refused")
	ErrDupAcquired     = errors.New("duplicate reserve acquired")
	ErrShortBatch      = errors.New("batch answered fewer keys than sent")
	ErrUnknownWorkload = errors.New("unknown workload")
)

// Config of one run. Zero values are not defaults: the caller fills all.
type Config struct {
	Concurrency int
	// Duration bounds the run; fill runs until it has loaded Keys.
	Duration time.Duration
	// MaxCalls, when > 0, stops the run after that many calls of the
	// workload (its step: one lifecycle, one batch), before Duration. For tests.
	MaxCalls  int64
	Lease     time.Duration
	Retention time.Duration
	// DupRatio is the share of reserve-dup's calls that re-reserve a key
	// already reserved.
	DupRatio float64
	// BatchSize is the keys per call of batch.
	BatchSize int
	// Keys is how many keys fill loads.
	Keys     int
	KeyShape string
	// Prefix starts every key, so that a run's keys are its own.
	Prefix string
	Seed   uint64
	// Rate, when > 0, paces the timed workloads open loop at Rate calls per
	// second in all (each worker Rate/Concurrency, staggered), and measures
	// each call's latency from its scheduled start, so a target that falls
	// behind shows its queueing (no coordinated omission). At most
	// Concurrency calls are in flight. 0: closed loop, as fast as the
	// target answers.
	Rate float64
}

// Result of one run: the summary of its samples and, for fill, the memory.
type Result struct {
	stats.Result
	Fill *FillResult `json:"fill,omitempty"`
	// Breakdown is what the target's server and the benchmark process
	// measured of the run, by figure name (the grid's stage breakdown);
	// nil for targets without one.
	Breakdown map[string]float64 `json:"breakdown,omitempty"`
}

// FillResult is fill's memory figure.
type FillResult struct {
	Keys        int64   `json:"keys"`
	Before      Memory  `json:"before"`
	After       Memory  `json:"after"`
	BytesPerKey float64 `json:"bytes_per_key"`
	// ExtraPerKey is the change per key of each extra figure the target
	// reports before and after (the grid's Go heap in use, etcd's db in use).
	ExtraPerKey map[string]float64 `json:"extra_per_key,omitempty"`
}

// step is one unit of a workload: it reports the operations it carried and
// the duplicates the target suppressed.
type step func(ctx context.Context, w *worker) (ops, dups int, err error)

type worker struct {
	t    Target
	cfg  *Config
	keys *keyGen
	rng  *rand.Rand
	held []string // reserve-dup: keys this worker reserved, a ring
	next int
	fill *atomic.Int64 // fill: keys left to load
}

// Run runs the named workload against t. ctx cancels it early.
func Run(ctx context.Context, name string, t Target, cfg Config) (Result, error) {
	var st step
	switch name {
	case ReserveUnique:
		st = reserveUnique
	case ReserveDup:
		st = reserveDup
	case Lifecycle:
		st = lifecycle
	case Batch:
		st = batch
	case Fill:
		return runFill(ctx, t, cfg)
	default:
		return Result{}, fmt.Errorf("%w %q", ErrUnknownWorkload, name)
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	res := drive(runCtx, t, &cfg, st, nil)
	return Result{Result: res}, ctx.Err()
}

// drive runs cfg.Concurrency workers calling st until ctx ends, MaxCalls
// is reached or a worker's fill counter runs out, and summarizes.
func drive(ctx context.Context, t Target, cfg *Config, st step, fill *atomic.Int64) stats.Result {
	var calls atomic.Int64
	var interval time.Duration // per worker, open loop
	if cfg.Rate > 0 && fill == nil {
		interval = time.Duration(float64(time.Second) * float64(cfg.Concurrency) / cfg.Rate)
	}
	recs := make([]*stats.Recorder, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range cfg.Concurrency {
		rec := stats.NewRecorder()
		recs[i] = rec
		w := &worker{
			t: t, cfg: cfg, fill: fill,
			keys: newKeyGen(cfg.Prefix, cfg.KeyShape, i, cfg.Seed),
			rng:  rand.New(rand.NewPCG(cfg.Seed^0x9e3779b97f4a7c15, uint64(i))),
		}
		wg.Go(func() {
			next := start.Add(interval * time.Duration(i) / time.Duration(cfg.Concurrency))
			for ctx.Err() == nil {
				if cfg.MaxCalls > 0 && calls.Add(1) > cfg.MaxCalls {
					return
				}
				t0 := time.Now()
				if interval > 0 {
					if !waitUntil(ctx, next) {
						return
					}
					t0, next = next, next.Add(interval)
				}
				ops, dups, err := st(ctx, w)
				end := time.Now()
				if errors.Is(err, errFillDone) {
					return
				}
				if err != nil && cutOff(ctx) {
					return // cut off by the end of the run, not a failure
				}
				rec.Record(stats.Sample{End: end.Sub(start), Latency: end.Sub(t0), Ops: ops, Dups: dups, Err: err})
			}
		})
	}
	wg.Wait()
	return stats.Summarize(recs, time.Since(start))
}

// cutOff reports whether the end of the run cut a call off: ctx is done,
// or its deadline has passed. A context's deadline timer cancels it from a
// goroutine of its own, which on a busy machine can run after a call that
// shares the deadline (a client's Batch RPC carries its callers' deadline)
// has already failed with it.
func cutOff(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// waitUntil waits for t or the end of ctx, and reports whether t came.
func waitUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func reserveUnique(ctx context.Context, w *worker) (int, int, error) {
	r, err := w.t.Reserve(ctx, w.keys.next(), w.cfg.Lease)
	if err != nil {
		return 1, 0, err
	}
	if !r.Acquired {
		return 1, 0, ErrNewKeyRefused
	}
	return 1, 0, nil
}

// reserveDup re-reserves one of the worker's own reserved keys with
// probability DupRatio, else reserves a new key.
func reserveDup(ctx context.Context, w *worker) (int, int, error) {
	if len(w.held) > 0 && w.rng.Float64() < w.cfg.DupRatio {
		r, err := w.t.Reserve(ctx, w.held[w.rng.IntN(len(w.held))], w.cfg.Lease)
		switch {
		case err != nil:
			return 1, 0, err
		case r.Acquired:
			return 1, 0, ErrDupAcquired
		}
		return 1, 1, nil
	}
	key := w.keys.next()
	r, err := w.t.Reserve(ctx, key, w.cfg.Lease)
	switch {
	case err != nil:
		return 1, 0, err
	case !r.Acquired:
		return 1, 0, ErrNewKeyRefused
	}
	if len(w.held) < heldKeys {
		w.held = append(w.held, key)
	} else {
		w.held[w.next] = key
		w.next = (w.next + 1) % heldKeys
	}
	return 1, 0, nil
}

// lifecycle is one message's life: reserve, complete with a retention, then
// the redelivery, whose reserve must be refused. One operation is one
// lifecycle (three calls).
func lifecycle(ctx context.Context, w *worker) (int, int, error) {
	r, err := w.t.Reserve(ctx, w.keys.next(), w.cfg.Lease)
	switch {
	case err != nil:
		return 1, 0, fmt.Errorf("reserve: %w", err)
	case !r.Acquired:
		return 1, 0, ErrNewKeyRefused
	}
	if err := w.t.Complete(ctx, r, w.cfg.Retention); err != nil {
		return 1, 0, fmt.Errorf("complete: %w", err)
	}
	again, err := w.t.Reserve(ctx, r.Key, w.cfg.Lease)
	switch {
	case err != nil:
		return 1, 0, fmt.Errorf("duplicate reserve: %w", err)
	case again.Acquired:
		return 1, 0, ErrDupAcquired
	}
	return 1, 1, nil
}

// batch reserves BatchSize new keys in one call. Operations are keys.
func batch(ctx context.Context, w *worker) (int, int, error) {
	return reserveMany(ctx, w, w.cfg.BatchSize, w.cfg.Lease)
}

func reserveMany(ctx context.Context, w *worker, n int, lease time.Duration) (int, int, error) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = w.keys.next()
	}
	rs, err := w.t.ReserveBatch(ctx, keys, lease)
	if err != nil {
		return n, 0, err
	}
	if len(rs) != n {
		return n, 0, fmt.Errorf("%w: %d of %d", ErrShortBatch, len(rs), n)
	}
	for _, r := range rs {
		if !r.Acquired {
			return n, 0, ErrNewKeyRefused
		}
	}
	return n, 0, nil
}

var errFillDone = errors.New("fill done")

// runFill reads the server's memory, loads Keys new keys in batches, reads
// it again and reports the difference per key. It is bounded by the keys,
// not by Duration.
func runFill(ctx context.Context, t Target, cfg Config) (Result, error) {
	before, err := t.Memory(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("memory before fill: %w", err)
	}
	var left atomic.Int64
	left.Store(int64(cfg.Keys))
	res := drive(ctx, t, &cfg, func(ctx context.Context, w *worker) (int, int, error) {
		n := int64(fillChunk)
		if rest := w.fill.Add(-n); rest < 0 {
			n += rest
			if n <= 0 {
				return 0, 0, errFillDone
			}
		}
		return reserveMany(ctx, w, int(n), FillLease)
	}, &left)
	if err := ctx.Err(); err != nil {
		return Result{Result: res}, err
	}
	after, err := t.Memory(ctx)
	if err != nil {
		return Result{Result: res}, fmt.Errorf("memory after fill: %w", err)
	}
	f := &FillResult{Keys: res.Ops, Before: before, After: after}
	if res.Ops > 0 {
		f.BytesPerKey = float64(after.Bytes-before.Bytes) / float64(res.Ops)
		for k, a := range after.Extra {
			if b, ok := before.Extra[k]; ok {
				if f.ExtraPerKey == nil {
					f.ExtraPerKey = map[string]float64{}
				}
				f.ExtraPerKey[k] = float64(a-b) / float64(res.Ops)
			}
		}
	}
	return Result{Result: res, Fill: f}, nil
}
