package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// settleTimeout bounds the Complete, Fail or Release that Process sends after
// the handler, which runs even when the caller's context has ended.
const settleTimeout = 5 * time.Second

// Handler processes one message under a lease. ctx is cancelled when the
// caller's context ends or when the lease is lost; in the second case
// context.Cause(ctx) matches ErrLeaseLost and the handler must stop and
// commit nothing. The returned bytes are stored as the key's result (<= 64
// KiB) and handed to duplicates. Wrap a returned error with RetryAfter or
// Poison to choose what happens to the key.
type Handler func(ctx context.Context, l Lease) ([]byte, error)

// Lease is what a handler holds.
type Lease struct {
	Namespace string
	Key       string
	// Token is the fencing token. Pass it to downstream systems that can
	// refuse a write carrying a token lower than the last one they saw.
	Token uint64
	// Attempt is 1 for the first attempt at the key.
	Attempt int
	// Deadline is the local safe deadline of the lease as granted (start +
	// lease - margin, by the client's clock). Background extensions move the
	// real one on; the handler's context is the authority.
	Deadline time.Time
}

// Processed is the outcome of a successful Process.
type Processed struct {
	// Result is the handler's result, or the stored result of a duplicate.
	Result []byte
	// Duplicate reports that the key was already completed: the handler did
	// not run.
	Duplicate bool
	// Token and Attempt are those of the lease the handler ran under (of the
	// completing lease for a duplicate, where the grid reports them).
	Token   uint64
	Attempt int
	// CompletedAt is when the key was completed, by the grid's clock.
	CompletedAt time.Time
}

type processConfig struct {
	lease           time.Duration
	margin          time.Duration
	maxAttempts     int
	retention       time.Duration
	poisonRetention time.Duration
	reserve         []ReserveOption // fingerprint, entity
	entity          EntityOption    // names the key's shard on every later operation
	waitForHolder   bool
}

type processOption func(*processConfig)

func (o processOption) applyProcess(p *processConfig) { o(p) }

// WaitForHolder makes Process wait, while ctx lasts, for a key held by
// another consumer (or in its retry delay) and reserve it again after the
// retry-after the grid gives, instead of returning a *BusyError.
func WaitForHolder() ProcessOption {
	return processOption(func(p *processConfig) { p.waitForHolder = true })
}

// WithLeaseMargin sets how long before the lease's end, measured from just
// before the Reserve was sent by the client's clock, Process stops trusting
// an unextended lease and cancels the handler (default lease/10). It covers
// clock skew between the client and the grid.
func WithLeaseMargin(d time.Duration) ProcessOption {
	return processOption(func(p *processConfig) { p.margin = d })
}

// failDirective is a handler error that says how to fail the key.
type failDirective struct {
	err        error
	retryAfter time.Duration
	poison     bool
}

func (e *failDirective) Error() string { return e.err.Error() }
func (e *failDirective) Unwrap() error { return e.err }

// RetryAfter wraps a handler error so that the key may be retried after d
// instead of the grid's exponential backoff. RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &failDirective{err: err, retryAfter: d}
}

// Poison wraps a handler error so that the key is poisoned at once (the
// message is bad and retrying cannot help). Poison(nil) is nil.
func Poison(err error) error {
	if err == nil {
		return nil
	}
	return &failDirective{err: err, poison: true}
}

// Process runs the whole idempotent receiver for one message: it reserves
// the key, runs h under the lease, extending it in the background, and
// settles the key with the outcome of h.
//
//   - ACQUIRED: h runs. On success the key is completed with h's result and
//     WithRetention; Process returns the result. On error (or panic) the key is
//     failed, retryable after the grid's backoff unless the error was wrapped
//     with RetryAfter or Poison, and Process returns h's error wrapped (a
//     *PanicError for a panic); it also matches ErrPoisoned when the key is
//     now poisoned. When ctx ends while h runs and h returns an error, the key
//     is released instead, without counting an attempt.
//   - DUPLICATE: h does not run; Processed.Duplicate is true and
//     Processed.Result is the stored result.
//   - BUSY: a *BusyError (matching ErrBusy), or with WaitForHolder a new
//     Reserve after the retry-after.
//   - POISONED, STALE, MISMATCH: ErrPoisoned, ErrStale, ErrMismatch.
//
// The lease is extended every lease/3 while h runs. h's context is cancelled
// with a cause matching ErrLeaseLost when an extension is refused, or when
// the client's clock passes the local safe deadline (start + lease - margin)
// without a successful extension. A Complete refused for a lost lease returns
// ErrLeaseLost: the work was done but not recorded, and another consumer may
// redo it; the fencing token in Lease is what protects downstream writes.
//
// If ctx ends while Process waits for an answer, the outcome of that
// operation on the grid is unknown; an acquired lease then expires by itself
// and counts as a failed attempt.
func (c *Client) Process(ctx context.Context, ns, key string, h Handler, opts ...ProcessOption) (Processed, error) {
	p := processConfig{lease: DefaultLease, maxAttempts: DefaultMaxAttempts, retention: DefaultRetention}
	for _, o := range opts {
		o.applyProcess(&p)
	}
	if p.margin == 0 {
		p.margin = p.lease / 10
	}
	if h == nil {
		return Processed{}, fmt.Errorf("%w: nil handler", ErrInvalidArgument)
	}
	if p.lease <= 0 || p.margin < 0 || p.margin >= p.lease {
		return Processed{}, fmt.Errorf("%w: lease %v with margin %v", ErrInvalidArgument, p.lease, p.margin)
	}
	ropts := append([]ReserveOption{WithLease(p.lease), WithMaxAttempts(p.maxAttempts)}, p.reserve...)
	if p.poisonRetention > 0 {
		ropts = append(ropts, WithPoisonRetention(p.poisonRetention))
	}
	reserve := ReserveOp(ns, key, ropts...)
	for {
		start := c.cfg.clock()
		r, sends, err := c.one(ctx, reserve)
		if err != nil {
			return Processed{}, err
		}
		switch r.Outcome {
		case OutcomeAcquired:
			return c.run(ctx, ns, key, h, &p, r, start)
		case OutcomeDuplicate:
			return Processed{Result: r.Result, Duplicate: true, Token: r.Token, Attempt: r.Attempt, CompletedAt: r.CompletedAt}, nil
		case OutcomeBusy:
			if !p.waitForHolder {
				return Processed{}, &BusyError{RetryAfter: r.RetryAfter, Attempt: r.Attempt, AfterRetry: sends > 1}
			}
			if err := waitFor(ctx, r.RetryAfter); err != nil {
				return Processed{}, fmt.Errorf("client: waiting for the holder: %w", err)
			}
		case OutcomePoisoned:
			return Processed{Attempt: r.Attempt}, fmt.Errorf("%w (attempts: %d)", ErrPoisoned, r.Attempt)
		case OutcomeStale, OutcomeMismatch:
			return Processed{}, r.Err()
		default:
			return Processed{}, fmt.Errorf("%w: reserve answered %v", errProtocol, r.Outcome)
		}
	}
}

// waitFor waits d plus up to 10% of jitter (at least 10 ms in all), or until
// ctx ends.
func waitFor(ctx context.Context, d time.Duration) error {
	d = max(d, 10*time.Millisecond)
	d += rand.N(d/10 + 1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// run runs the handler under the acquired lease r and settles the key.
func (c *Client) run(ctx context.Context, ns, key string, h Handler, p *processConfig, r Result, start time.Time) (Processed, error) {
	l := Lease{Namespace: ns, Key: key, Token: r.Token, Attempt: r.Attempt, Deadline: start.Add(p.lease - p.margin)}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	kctx, kstop := context.WithCancel(ctx)
	k := &keeper{c: c, ns: ns, key: key, token: r.Token, lease: p.lease, margin: p.margin, entity: p.entity}
	kdone := make(chan struct{})
	go func() {
		defer close(kdone)
		k.run(kctx, cancel, start)
	}()
	stopKeeper := sync.OnceFunc(func() { kstop(); <-kdone })
	defer stopKeeper() // also when the handler calls runtime.Goexit

	res, herr := callHandler(hctx, h, l)
	stopKeeper()

	done := Processed{Token: r.Token, Attempt: r.Attempt}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer scancel()
	if herr == nil {
		cr, err := c.Complete(sctx, ns, key, r.Token, WithRetention(p.retention), WithResult(res), p.entity)
		if errors.Is(err, ErrLimitExceeded) || errors.Is(err, ErrInvalidArgument) {
			// The grid will never take this result (over 64 KiB). The work
			// is done: settle without it rather than leave the key held and
			// run the handler again after the lease expires.
			if cr, err2 := c.Complete(sctx, ns, key, r.Token, WithRetention(p.retention), p.entity); err2 == nil {
				done.CompletedAt = cr.CompletedAt
				return done, fmt.Errorf("client: handler succeeded on attempt %d; key completed without its result, which the grid refused: %w", r.Attempt, err)
			}
		}
		if err != nil {
			return done, fmt.Errorf("client: handler succeeded on attempt %d but its result was not recorded: %w", r.Attempt, err)
		}
		done.Result, done.CompletedAt = res, cr.CompletedAt
		return done, nil
	}
	cause := context.Cause(hctx)
	lost := errors.Is(cause, ErrLeaseLost)
	if lost {
		herr = fmt.Errorf("%w: %w", cause, herr)
	}
	if ctx.Err() != nil && !lost {
		_, err := c.Release(sctx, ns, key, r.Token, p.entity)
		if err != nil {
			return done, fmt.Errorf("client: handler stopped (%w), and release failed: %w", herr, err)
		}
		return done, fmt.Errorf("client: handler stopped, key released: %w", herr)
	}
	return done, c.fail(sctx, ns, key, r, p, herr)
}

// fail settles a failed attempt and returns the handler's error wrapped.
func (c *Client) fail(ctx context.Context, ns, key string, r Result, p *processConfig, herr error) error {
	opts := []FailOption{p.entity}
	var d *failDirective
	if errors.As(herr, &d) {
		if d.poison {
			opts = append(opts, WithPoison())
		} else {
			opts = append(opts, WithRetryAfter(d.retryAfter))
		}
	}
	if p.poisonRetention > 0 {
		opts = append(opts, WithRetention(p.poisonRetention))
	}
	fr, err := c.Fail(ctx, ns, key, r.Token, opts...)
	if d != nil && !d.poison && errors.Is(err, ErrInvalidArgument) {
		// A retry-after the grid refuses (out of range): fail with the
		// grid's backoff instead of leaving the key held.
		fr, err = c.Fail(ctx, ns, key, r.Token, slices.DeleteFunc(opts, func(o FailOption) bool {
			_, ok := o.(retryAfterOption)
			return ok
		})...)
	}
	switch {
	case err != nil:
		return fmt.Errorf("client: handler failed on attempt %d (%w), and so did Fail: %w", r.Attempt, herr, err)
	case fr.State == StatePoisoned:
		return fmt.Errorf("client: handler failed on attempt %d, key poisoned: %w: %w", r.Attempt, ErrPoisoned, herr)
	default:
		return fmt.Errorf("client: handler failed on attempt %d, retry after %v: %w", r.Attempt, fr.Deadline.Sub(fr.Now), herr)
	}
}

// callHandler runs h, turning a panic into a *PanicError.
func callHandler(ctx context.Context, h Handler, l Lease) (res []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			res, err = nil, &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h(ctx, l)
}

// keeper extends a lease in the background and cancels the handler when the
// lease is lost or cannot be trusted any more.
type keeper struct {
	c      *Client
	ns     string
	key    string
	token  uint64
	lease  time.Duration
	margin time.Duration
	entity EntityOption
}

// run extends every lease/3 (sooner if the margin demands it) until ctx ends.
// It cancels the handler, with a cause matching ErrLeaseLost, when an Extend
// answers LEASE_LOST or when the clock reaches the local safe deadline, start
// + lease - margin from the start of the last successful Extend. It wakes at
// least every margin (10 ms .. 1 s) to notice a clock that jumped.
func (k *keeper) run(ctx context.Context, cancel context.CancelCauseFunc, start time.Time) {
	valid := k.lease - k.margin
	every := min(k.lease/3, valid/2)
	poll := min(max(k.margin, 10*time.Millisecond), time.Second)
	deadline, next := start.Add(valid), start.Add(every)
	for {
		now := k.c.cfg.clock()
		if !now.Before(deadline) {
			cancel(fmt.Errorf("%w: no extension succeeded before the local safe deadline %v", ErrLeaseLost, deadline.Format(time.RFC3339Nano)))
			return
		}
		if !now.Before(next) {
			ectx, ecancel := context.WithTimeout(ctx, deadline.Sub(now))
			_, err := k.c.Extend(ectx, k.ns, k.key, k.token, k.lease, k.entity)
			ecancel()
			switch {
			case ctx.Err() != nil:
				return
			case err == nil:
				deadline, next = now.Add(valid), now.Add(every)
			case errors.Is(err, ErrLeaseLost):
				cancel(fmt.Errorf("%w: extension refused", err))
				return
			default:
				next = k.c.cfg.clock().Add(poll)
			}
			continue
		}
		t := time.NewTimer(min(next.Sub(now), deadline.Sub(now), poll))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
