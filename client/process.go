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
	// TookOverExpired reports that the lease was taken over from one that
	// expired unsettled: the previous holder crashed, hung or overran it,
	// perhaps on this very message (Result.TookOverExpired).
	TookOverExpired bool
	// Deadline is the local safe deadline of the lease as granted
	// (Result.SafeUntil of the Reserve). Background extensions move the real
	// one on; the handler's context is the authority.
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
	// RetryAfter is, when the handler failed and the key was failed
	// retryably, how long the grid holds the key before another attempt:
	// the delay to redeliver the message after (Process returns the
	// handler's error). Zero otherwise.
	RetryAfter time.Duration
	// CompletedAt is when the key was completed, by the grid's clock.
	CompletedAt time.Time

	// Overran reports that the handler returned at or after the lease's
	// local safe deadline (as the last successful extension left it): part
	// of its work ran while the lease could no longer be trusted. Process
	// settled all the same, fenced by the token. A Complete the grid
	// accepted proves that no other consumer was granted the key meanwhile
	// (a grant changes the token); downstream writes made without the token
	// were unprotected for that time all the same.
	Overran bool
	// ReserveSends and SettleSends are the sends (Result.Sends) of the
	// Reserve whose answer Process acted on and of its Complete, Fail or
	// Release (0 when none was made; the sum when one was made twice).
	// Resent reports that one of those answers came from a resend, and
	// Replayed that the Reserve's grant was its own earlier one answered
	// again (Result.Replayed).
	ReserveSends int
	SettleSends  int
	Resent       bool
	Replayed     bool
}

type processConfig struct {
	lease           time.Duration
	margin          time.Duration
	hasMargin       bool
	maxAttempts     int
	retention       time.Duration
	poisonRetention time.Duration
	reserve         []ReserveOption // fingerprint, entity
	entity          EntityOption    // names the key's shard on every later operation
	waitForHolder   bool
	isolation       *Isolation
	redelivered     bool
}

type processOption func(*processConfig)

func (o processOption) applyProcess(p *processConfig) { o(p) }

// WaitForHolder makes Process wait, while ctx lasts, for a key held by
// another consumer (or in its retry delay) and reserve it again after the
// retry-after the grid gives, instead of returning a *BusyError.
func WaitForHolder() ProcessOption {
	return processOption(func(p *processConfig) { p.waitForHolder = true })
}

// WithIsolation makes Process keep its handler apart from those of the
// other Process calls that share g, as a consumer's messages do, so that a
// crash loop costs attempts of its culprit only (see Isolation).
func WithIsolation(g *Isolation) ProcessOption {
	return processOption(func(p *processConfig) { p.isolation = g })
}

// Redelivered tells Process that the broker delivers the message again
// (RabbitMQ's redelivered flag, a JetStream delivery count above 1): with
// WithIsolation it is a suspect, reserved apart from other suspects. It
// changes nothing else.
func Redelivered() ProcessOption {
	return processOption(func(p *processConfig) { p.redelivered = true })
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
//     is failed all the same, the attempt counted: h may have applied its
//     effect before it saw ctx end (a commit that went through as its
//     context ended), and a release would let the next consumer run it
//     again as a first attempt. A consumer that stops lets its handlers
//     finish first (the broker adapters' WithStopGrace).
//   - DUPLICATE: h does not run; Processed.Duplicate is true and
//     Processed.Result is the stored result.
//   - BUSY: a *BusyError (matching ErrBusy), or with WaitForHolder a new
//     Reserve after the retry-after.
//   - POISONED, STALE, MISMATCH: ErrPoisoned, ErrStale, ErrMismatch.
//
// The lease is trusted until its local safe deadline (Result.SafeUntil of
// the Reserve, moved on by each successful extension): the client's clock
// before the Reserve was first sent, plus the lease the grid answered,
// minus the margin (WithLeaseMargin, default DefaultLeaseMargin). Process
// checks it twice:
//
//   - Before h: an answer that arrives at or after the safe deadline (a slow
//     grid or network, a clock that jumped, a replayed grant with little
//     left) does not run h, which might overlap another consumer. Process
//     releases the key, fenced by the token, and returns ErrLeaseExpired.
//     Releasing is honest and cheap: the grid's lease may still run (the
//     margin is kept for skew), and a release frees the key at once without
//     counting an attempt, where a lease left to lapse would block the key
//     until its end and then count as a failed attempt of a handler that
//     never ran. A Release answered LEASE_LOST means another consumer holds
//     the key already, and is reported as such.
//   - After h: a handler that returned at or after the safe deadline has
//     overrun its window (Processed.Overran). Its Complete or Fail is sent
//     all the same: the settle is fenced by the token, so the grid refuses
//     it with LEASE_LOST if another consumer was granted the key meanwhile,
//     and accepting it proves that none was.
//
// The lease is extended every (lease - margin)/3 while h runs. h's context
// is cancelled with a cause matching ErrLeaseLost when an extension is
// refused, or when the client's clock reaches the local safe deadline
// without a successful extension. A Complete refused for a lost
// lease returns ErrLeaseLost: the work was done but not recorded, and
// another consumer may redo it; the fencing token in Lease is what protects
// downstream writes.
//
// The Reserve carries one request id (random, or WithRequestID) in all its
// sends, including those made again with WaitForHolder, so that a grid
// that keeps request ids answers a resend with the grant the first send
// got (Processed.Replayed) instead of BUSY against this very call.
//
// If ctx ends while Process waits for an answer, the outcome of that
// operation on the grid is unknown; an acquired lease then expires by itself
// and counts as a failed attempt.
func (c *Client) Process(ctx context.Context, ns, key string, h Handler, opts ...ProcessOption) (Processed, error) {
	ctx, end := c.traceProcess(ctx, ns)
	done, err := c.process(ctx, ns, key, h, opts...)
	end(done, err)
	return done, err
}

func (c *Client) process(ctx context.Context, ns, key string, h Handler, opts ...ProcessOption) (Processed, error) {
	p := processConfig{lease: DefaultLease, maxAttempts: DefaultMaxAttempts, retention: DefaultRetention}
	for _, o := range opts {
		o.applyProcess(&p)
	}
	if h == nil {
		return Processed{}, fmt.Errorf("%w: nil handler", ErrInvalidArgument)
	}
	if p.lease <= 0 {
		return Processed{}, fmt.Errorf("%w: lease %v", ErrInvalidArgument, p.lease)
	}
	margin, err := leaseMargin(p.lease, p.hasMargin, p.margin)
	if err != nil {
		return Processed{}, err
	}
	p.margin = margin
	ropts := append([]ReserveOption{WithLease(p.lease), WithMaxAttempts(p.maxAttempts)}, p.reserve...)
	if p.poisonRetention > 0 {
		ropts = append(ropts, WithPoisonRetention(p.poisonRetention))
	}
	reserve := ReserveOp(ns, key, append(ropts, WithLeaseMargin(p.margin))...)
	g := p.isolation
	for {
		held, err := g.enter(ctx, ns, key, p.redelivered)
		if err != nil {
			return Processed{}, fmt.Errorf("client: waiting to reserve apart from a message taken over from a crashed holder: %w", err)
		}
		r, sends, err := c.one(ctx, reserve)
		if err != nil {
			g.leave(held)
			return Processed{ReserveSends: sends}, err
		}
		if r.Outcome == OutcomeAcquired {
			held = g.granted(held, ns, key, r.TookOverExpired)
			defer func() { g.leave(held) }()
			return c.run(ctx, ns, key, h, &p, r, &held)
		}
		g.refused(held, ns, key, r.Outcome == OutcomeBusy)
		switch r.Outcome {
		case OutcomeDuplicate:
			return Processed{Result: r.Result, Duplicate: true, Token: r.Token, Attempt: r.Attempt, CompletedAt: r.CompletedAt,
				ReserveSends: r.Sends, Resent: r.Resent}, nil
		case OutcomeBusy:
			if !p.waitForHolder {
				return Processed{ReserveSends: r.Sends, Resent: r.Resent},
					&BusyError{RetryAfter: r.RetryAfter, Attempt: r.Attempt, AfterRetry: r.Resent}
			}
			if err := waitFor(ctx, r.RetryAfter); err != nil {
				return Processed{}, fmt.Errorf("client: waiting for the holder: %w", err)
			}
		case OutcomePoisoned:
			return Processed{Attempt: r.Attempt, ReserveSends: r.Sends, Resent: r.Resent}, fmt.Errorf("%w (attempts: %d)", ErrPoisoned, r.Attempt)
		case OutcomeStale, OutcomeMismatch:
			return Processed{ReserveSends: r.Sends, Resent: r.Resent}, r.Err()
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

// settled adds the sends of a settle's answer to done.
func (done *Processed) settled(r Result) {
	done.SettleSends += r.Sends
	done.Resent = done.Resent || r.Resent
}

// run runs the handler under the acquired lease r and settles the key.
// With an Isolation, *held is the call's hold: a takeover waits here, its
// lease kept alive, until it may run alone.
func (c *Client) run(ctx context.Context, ns, key string, h Handler, p *processConfig, r Result, held *hold) (Processed, error) {
	done := Processed{Token: r.Token, Attempt: r.Attempt, ReserveSends: r.Sends, Resent: r.Resent, Replayed: r.Replayed}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer scancel()
	if now := c.cfg.clock(); !now.Before(r.SafeUntil) {
		return done, c.tooLate(sctx, ns, key, p, r, now, &done)
	}

	l := Lease{Namespace: ns, Key: key, Token: r.Token, Attempt: r.Attempt, Deadline: r.SafeUntil, TookOverExpired: r.TookOverExpired}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	kctx, kstop := context.WithCancel(ctx)
	k := &keeper{c: c, ns: ns, key: key, token: r.Token, lease: p.lease, margin: p.margin, entity: p.entity, safe: r.SafeUntil}
	kdone := make(chan struct{})
	go func() {
		defer close(kdone)
		k.run(kctx, cancel)
	}()
	stopKeeper := sync.OnceFunc(func() { kstop(); <-kdone })
	defer stopKeeper() // also when the handler calls runtime.Goexit

	var res []byte
	var herr error
	ran := true
	if *held == holdUpgrading {
		*held, herr = p.isolation.runAlone(hctx)
		if herr != nil {
			// Stopped or the lease lost before the handler ran. The
			// key is failed, not released: a release would forget the
			// attempts that its crashed holders used, and a crash loop
			// would never end in POISONED.
			herr = fmt.Errorf("client: stopped while waiting to run alone, the handler did not run: %w", herr)
			ran = false
		}
	}
	if herr == nil {
		res, herr = callHandler(hctx, h, l)
	}
	stopKeeper()
	// The keeper has stopped: k.safe is the deadline its last successful
	// extension left (an extension cut short by the stop is not counted).
	done.Overran = !c.cfg.clock().Before(k.safe)

	if herr == nil {
		cr, err := c.Complete(sctx, ns, key, r.Token, WithRetention(p.retention), WithResult(res), p.entity)
		done.settled(cr)
		if errors.Is(err, ErrLimitExceeded) || errors.Is(err, ErrInvalidArgument) {
			// The grid will never take this result (over 64 KiB). The work
			// is done: settle without it rather than leave the key held and
			// run the handler again after the lease expires.
			cr, err2 := c.Complete(sctx, ns, key, r.Token, WithRetention(p.retention), p.entity)
			done.settled(cr)
			if err2 == nil {
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
	if ctx.Err() != nil && !lost && ran {
		// Stopped mid-way, the handler may have applied its effect before
		// it saw the stop (a commit that went through as its context
		// ended): the key is failed like any handler error, the attempt
		// counted, never released for the next consumer to run it again
		// as a first attempt.
		herr = fmt.Errorf("client: handler stopped, its effect may have been applied: %w", herr)
	}
	return done, c.fail(sctx, ns, key, r, p, herr, &done)
}

// tooLate settles a lease whose answer came at or after its local safe
// deadline, without running the handler: it releases the key (see
// Process) and returns the ErrLeaseExpired error.
func (c *Client) tooLate(ctx context.Context, ns, key string, p *processConfig, r Result, now time.Time, done *Processed) error {
	late := fmt.Errorf("%w: the Reserve's answer came %v after the local safe deadline %s (lease %v, margin %v, %d sends); the handler did not run",
		ErrLeaseExpired, now.Sub(r.SafeUntil), r.SafeUntil.Format(time.RFC3339Nano), p.lease, p.margin, r.Sends)
	rr, err := c.Release(ctx, ns, key, r.Token, p.entity)
	done.settled(rr)
	switch {
	case err == nil:
		return fmt.Errorf("%w, key released", late)
	case errors.Is(err, ErrLeaseLost):
		return fmt.Errorf("%w, and another consumer holds the key already", late)
	default:
		return fmt.Errorf("%w, and release failed (the lease expires by itself and counts as a failed attempt): %w", late, err)
	}
}

// fail settles a failed attempt and returns the handler's error wrapped.
func (c *Client) fail(ctx context.Context, ns, key string, r Result, p *processConfig, herr error, done *Processed) error {
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
	done.settled(fr)
	if d != nil && !d.poison && errors.Is(err, ErrInvalidArgument) {
		// A retry-after the grid refuses (out of range): fail with the
		// grid's backoff instead of leaving the key held.
		fr, err = c.Fail(ctx, ns, key, r.Token, slices.DeleteFunc(opts, func(o FailOption) bool {
			_, ok := o.(retryAfterOption)
			return ok
		})...)
		done.settled(fr)
	}
	switch {
	case err != nil:
		return fmt.Errorf("client: handler failed on attempt %d (%w), and so did Fail: %w", r.Attempt, herr, err)
	case fr.State == StatePoisoned:
		return fmt.Errorf("client: handler failed on attempt %d, key poisoned: %w: %w", r.Attempt, ErrPoisoned, herr)
	default:
		done.RetryAfter = fr.Deadline.Sub(fr.Now)
		return fmt.Errorf("client: handler failed on attempt %d, retry after %v: %w", r.Attempt, done.RetryAfter, herr)
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
	// safe is the lease's local safe deadline: the Reserve's SafeUntil,
	// then that of each successful Extend. Written by run only; read by
	// Process once run has returned.
	safe time.Time
}

// run extends every third of the trusted window (lease - margin) until ctx
// ends, so that an extension has two thirds of the window to get through:
// that matters for short leases, whose margin (DefaultLeaseMargin) takes
// up to half of them. It cancels the handler, with a cause matching ErrLeaseLost, when an Extend
// answers LEASE_LOST or when the clock reaches the local safe deadline, the
// SafeUntil of the Reserve or of the last successful Extend. It wakes at
// least every margin (10 ms .. 1 s) to notice a clock that jumped.
func (k *keeper) run(ctx context.Context, cancel context.CancelCauseFunc) {
	valid := k.lease - k.margin
	every := valid / 3
	poll := min(max(k.margin, 10*time.Millisecond), time.Second)
	// The next extension is due every after the lease's start, which is
	// valid before its safe deadline (sooner for a lease whose answer left
	// less than the lease: a replayed grant).
	next := k.safe.Add(every - valid)
	for {
		now := k.c.cfg.clock()
		if !now.Before(k.safe) {
			cancel(fmt.Errorf("%w: no extension succeeded before the local safe deadline %v", ErrLeaseLost, k.safe.Format(time.RFC3339Nano)))
			return
		}
		if !now.Before(next) {
			ectx, ecancel := context.WithTimeout(ctx, k.safe.Sub(now))
			er, err := k.c.Extend(ectx, k.ns, k.key, k.token, k.lease, k.entity, WithLeaseMargin(k.margin))
			ecancel()
			switch {
			case ctx.Err() != nil:
				return
			case err == nil:
				k.safe = er.SafeUntil
				next = k.safe.Add(every - valid)
			case errors.Is(err, ErrLeaseLost):
				cancel(fmt.Errorf("%w: extension refused", err))
				return
			default:
				next = k.c.cfg.clock().Add(poll)
			}
			continue
		}
		t := time.NewTimer(min(next.Sub(now), k.safe.Sub(now), poll))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
