package check

import (
	"fmt"
	"math/rand/v2"

	"github.com/l4xg/grid/client"
)

// Times are the durations a Worker asks for, in ms: each is Min plus a
// random part below Span.
type Times struct {
	LeaseMin, LeaseSpan         int64
	RetentionMin, RetentionSpan int64
	RetryMin, RetrySpan         int64
}

// Worker is one caller of a randomized workload: it remembers the leases
// it holds and the tokens it held, and picks operations that make sense for
// a consumer (reserve, then complete, fail, extend or release what it
// holds; get; forget keys it does not hold), plus some that do not
// (settles with a superseded token). Keys are Prefix followed by k0 ..
// k(Keys-1). A Worker is not safe for concurrent use: one goroutine each.
type Worker struct {
	ID     int
	Keys   int
	Prefix string
	// Forgets is the share (percent) of Forget among the operations on
	// keys the worker does not hold (0: 10).
	Forgets int
	Times   Times
	rng     *rand.Rand
	held    map[string]uint64 // key -> token of a lease this worker holds
	stale   []uint64          // tokens it held before
}

// NewWorker is worker id of a workload whose choices seed fixes.
func NewWorker(id int, seed uint64, keys int, t Times) *Worker {
	return &Worker{ID: id, Keys: keys, Times: t, rng: rand.New(rand.NewPCG(seed, uint64(id))), held: map[string]uint64{}}
}

// Rand is the worker's random source (for choices of the caller's that
// the same seed must repeat).
func (w *Worker) Rand() *rand.Rand { return w.rng }

func (w *Worker) pick(min, span int64) int64 {
	if span <= 0 {
		return min
	}
	return min + w.rng.Int64N(span)
}

func (w *Worker) lease() int64     { return w.pick(w.Times.LeaseMin, w.Times.LeaseSpan) }
func (w *Worker) retention() int64 { return w.pick(w.Times.RetentionMin, w.Times.RetentionSpan) }
func (w *Worker) retryAfter() int64 {
	return w.pick(w.Times.RetryMin, w.Times.RetrySpan)
}

// Next is the worker's next operation.
func (w *Worker) Next() Input {
	key := fmt.Sprintf("%sk%d", w.Prefix, w.rng.IntN(w.Keys))
	in := Input{Key: key}
	p := w.rng.IntN(100)
	if tok, ok := w.held[key]; ok {
		in.Token = tok
		switch {
		case p < 35:
			in.Kind, in.Retention = KindComplete, w.retention()
			in.Result = fmt.Sprintf("w%d-%d", w.ID, w.rng.IntN(1000))
		case p < 50:
			in.Kind, in.RetryAfter, in.Retention = KindFail, w.retryAfter(), w.retention()
			in.Poison = w.rng.IntN(4) == 0
		case p < 75:
			in.Kind, in.Lease = KindExtend, w.lease()
		case p < 88:
			in.Kind = KindRelease
		default:
			in.Kind = KindGet
		}
		return in
	}
	forgets := w.Forgets
	if forgets == 0 {
		forgets = 10
	}
	switch {
	case p < 45:
		in.Kind, in.Lease, in.Retention = KindReserve, w.lease(), w.retention()
		in.MaxAttempts = 1 + w.rng.IntN(3)
	case p < 80-forgets:
		in.Kind = KindGet
	case p < 80:
		in.Kind = KindForget
	default: // a settle with a token this worker no longer holds
		in.Token = 1 + w.rng.Uint64N(1<<20)
		if len(w.stale) > 0 {
			in.Token = w.stale[w.rng.IntN(len(w.stale))]
		}
		switch w.rng.IntN(4) {
		case 0:
			in.Kind, in.Retention, in.Result = KindComplete, w.retention(), "stale"
		case 1:
			in.Kind, in.RetryAfter, in.Retention = KindFail, w.retryAfter(), w.retention()
		case 2:
			in.Kind, in.Lease = KindExtend, w.lease()
		default:
			in.Kind = KindRelease
		}
	}
	return in
}

// Saw tells the worker what became of in: it keeps the lease a Reserve
// granted and drops the one a settle ended (or may have ended: an unknown
// outcome of anything but a Get or an Extend).
func (w *Worker) Saw(in Input, out Output) {
	if out.Unknown {
		if tok, ok := w.held[in.Key]; ok && in.Kind != KindGet && in.Kind != KindExtend {
			delete(w.held, in.Key)
			w.stale = append(w.stale, tok)
		}
		return
	}
	switch {
	case in.Kind == KindReserve && out.Outcome == client.OutcomeAcquired:
		w.held[in.Key] = out.Token
	case in.Kind == KindGet, in.Kind == KindForget:
	case in.Kind == KindExtend && out.Outcome == client.OutcomeOK:
	case in.Kind != KindReserve:
		if tok, ok := w.held[in.Key]; ok && tok == in.Token {
			delete(w.held, in.Key)
			w.stale = append(w.stale, tok)
		}
	}
}
