package client

import (
	"context"
	"fmt"
	"time"

	"github.com/l4xg/grid/api/gridpb"
)

// Op is one operation for Batch, made by ReserveOp, CompleteOp, FailOp,
// ReleaseOp, ExtendOp, GetOp or ForgetOp. The zero Op is invalid.
type Op struct {
	pb *gridpb.Op
	// margin is the lease margin of a Reserve or Extend (Result.SafeUntil).
	margin time.Duration
	// err refuses the operation before it is sent (an option out of range).
	err error
}

// settles reports whether a LEASE_LOST answer to the operation is an error
// of the holder (Complete, Fail, Release, Extend).
func (o Op) settles() bool {
	switch o.pb.GetOp().(type) {
	case *gridpb.Op_Complete, *gridpb.Op_Fail, *gridpb.Op_Release, *gridpb.Op_Extend:
		return true
	}
	return false
}

// outcomeErr is the error a call returns for the grid's answer r: a lost
// lease fails the settling operations; other outcomes are answers.
func (o Op) outcomeErr(r Result) error {
	if r.Outcome == OutcomeUnspecified {
		return fmt.Errorf("%w: no outcome", errProtocol)
	}
	if r.Outcome == OutcomeLeaseLost && o.settles() {
		return ErrLeaseLost
	}
	return nil
}

// ReserveOp is a Reserve operation for Batch. Without WithLease the lease is
// DefaultLease. It carries a random request id (WithRequestID), drawn once:
// the Op keeps it across its resends, and across Batch calls that send the
// same Op again, so that each of those resends is recognised as the same
// logical Reserve. Make a new Op for a new Reserve.
func ReserveOp(ns, key string, opts ...ReserveOption) Op {
	r := &gridpb.ReserveRequest{Namespace: []byte(ns), Key: []byte(key), LeaseMs: millis(DefaultLease)}
	var margin LeaseMarginOption
	hasID, hasMargin := false, false
	for _, o := range opts {
		o.applyReserve(r)
		switch o := o.(type) {
		case requestIDOption:
			hasID = true
		case LeaseMarginOption:
			margin, hasMargin = o, true
		}
	}
	if !hasID {
		r.RequestId = newRequestID()
	}
	op := Op{pb: &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: r}}}
	op.margin, op.err = leaseMargin(askedLease(op.pb), hasMargin, time.Duration(margin))
	if op.err == nil {
		op.err = checkRequestID(r.RequestId)
	}
	return op
}

// CompleteOp is a Complete operation for Batch.
func CompleteOp(ns, key string, token uint64, opts ...CompleteOption) Op {
	r := &gridpb.CompleteRequest{Namespace: []byte(ns), Key: []byte(key), Token: token}
	for _, o := range opts {
		o.applyComplete(r)
	}
	return Op{pb: &gridpb.Op{Op: &gridpb.Op_Complete{Complete: r}}}
}

// FailOp is a Fail operation for Batch.
func FailOp(ns, key string, token uint64, opts ...FailOption) Op {
	r := &gridpb.FailRequest{Namespace: []byte(ns), Key: []byte(key), Token: token}
	for _, o := range opts {
		o.applyFail(r)
	}
	return Op{pb: &gridpb.Op{Op: &gridpb.Op_Fail{Fail: r}}}
}

// ReleaseOp is a Release operation for Batch.
func ReleaseOp(ns, key string, token uint64, opts ...ReleaseOption) Op {
	r := &gridpb.ReleaseRequest{Namespace: []byte(ns), Key: []byte(key), Token: token}
	for _, o := range opts {
		o.applyRelease(r)
	}
	return Op{pb: &gridpb.Op{Op: &gridpb.Op_Release{Release: r}}}
}

// ExtendOp is an Extend operation for Batch. A lease <= 0 means DefaultLease.
func ExtendOp(ns, key string, token uint64, lease time.Duration, opts ...ExtendOption) Op {
	if lease <= 0 {
		lease = DefaultLease
	}
	r := &gridpb.ExtendRequest{Namespace: []byte(ns), Key: []byte(key), Token: token, LeaseMs: millis(lease)}
	var margin LeaseMarginOption
	hasMargin := false
	for _, o := range opts {
		o.applyExtend(r)
		if m, ok := o.(LeaseMarginOption); ok {
			margin, hasMargin = m, true
		}
	}
	op := Op{pb: &gridpb.Op{Op: &gridpb.Op_Extend{Extend: r}}}
	op.margin, op.err = leaseMargin(lease, hasMargin, time.Duration(margin))
	return op
}

// GetOp is a Get operation for Batch.
func GetOp(ns, key string, opts ...GetOption) Op {
	r := &gridpb.GetRequest{Namespace: []byte(ns), Key: []byte(key)}
	for _, o := range opts {
		o.applyGet(r)
	}
	return Op{pb: &gridpb.Op{Op: &gridpb.Op_Get{Get: r}}}
}

// ForgetOp is a Forget operation for Batch.
func ForgetOp(ns, key string, opts ...ForgetOption) Op {
	r := &gridpb.ForgetRequest{Namespace: []byte(ns), Key: []byte(key)}
	for _, o := range opts {
		o.applyForget(r)
	}
	return Op{pb: &gridpb.Op{Op: &gridpb.Op_Forget{Forget: r}}}
}

// Reserve takes the processing lease of a key, or says why not. Every
// outcome (ACQUIRED, BUSY, DUPLICATE, POISONED, STALE, MISMATCH) comes back in
// the Result with a nil error; Result.Err turns it into an error. The error
// is for calls that failed.
//
// An ACQUIRED Result carries the lease's local safe deadline, SafeUntil:
// the client's clock just before the first send, plus the lease as the
// answer states it, minus the margin (WithLeaseMargin, default
// DefaultLeaseMargin). Trust the lease only until then, unless an Extend
// moves it on; Result.Deadline is the grid's clock, not the client's.
//
// Every Reserve carries a request id (random unless WithRequestID), the
// same in all its resends. A Reserve resent after a transport failure may
// have been granted the first time: a grid that keeps request ids answers
// that grant again (ACQUIRED, same token, Result.Replayed and Result.Resent
// set). A grid that ignores them answers BUSY, held by a lease whose token
// this caller never saw (Result.Resent set); Process reports that as a
// *BusyError with AfterRetry set.
func (c *Client) Reserve(ctx context.Context, ns, key string, opts ...ReserveOption) (Result, error) {
	r, _, err := c.one(ctx, ReserveOp(ns, key, opts...))
	return r, err
}

// Complete settles a held key as COMPLETED, storing WithResult's bytes for
// duplicates during WithRetention (server default 7 days). Repeating it after
// success answers OK again. A superseded token returns ErrLeaseLost.
func (c *Client) Complete(ctx context.Context, ns, key string, token uint64, opts ...CompleteOption) (Result, error) {
	r, _, err := c.one(ctx, CompleteOp(ns, key, token, opts...))
	return r, err
}

// Fail settles a held key as FAILED, retryable after WithRetryAfter or the
// grid's exponential backoff, or as POISONED with WithPoison or when its
// attempts are spent. A superseded token returns ErrLeaseLost.
func (c *Client) Fail(ctx context.Context, ns, key string, token uint64, opts ...FailOption) (Result, error) {
	r, _, err := c.one(ctx, FailOp(ns, key, token, opts...))
	return r, err
}

// Release gives a held key back without counting an attempt (nack, graceful
// shutdown). A key held under another token returns ErrLeaseLost; releasing a
// key nobody holds answers OK, so a retried Release succeeds.
func (c *Client) Release(ctx context.Context, ns, key string, token uint64, opts ...ReleaseOption) (Result, error) {
	r, _, err := c.one(ctx, ReleaseOp(ns, key, token, opts...))
	return r, err
}

// Extend renews a held lease to lease from the grid's now (<= 0 means
// DefaultLease). A superseded token, or a key no longer PROCESSING, returns
// ErrLeaseLost. The Result's SafeUntil is the lease's new local safe
// deadline, computed as for Reserve from the deadline the grid answered
// (WithLeaseMargin, default DefaultLeaseMargin of lease): it replaces the
// one the holder had.
func (c *Client) Extend(ctx context.Context, ns, key string, token uint64, lease time.Duration, opts ...ExtendOption) (Result, error) {
	r, _, err := c.one(ctx, ExtendOp(ns, key, token, lease, opts...))
	return r, err
}

// Get returns the record of a key, State ABSENT when there is none. The read
// is linearizable unless WithStaleOK.
func (c *Client) Get(ctx context.Context, ns, key string, opts ...GetOption) (Result, error) {
	r, _, err := c.one(ctx, GetOp(ns, key, opts...))
	return r, err
}

// Forget removes a key's record so that its message is processed again;
// Result.Existed says whether there was one.
func (c *Client) Forget(ctx context.Context, ns, key string, opts ...ForgetOption) (Result, error) {
	r, _, err := c.one(ctx, ForgetOp(ns, key, opts...))
	return r, err
}

// one runs a single operation; sends is how many of its sends may have
// been applied (Result.Sends). On an error the Result is zero but for Sends.
func (c *Client) one(ctx context.Context, op Op) (Result, int, error) {
	if err := op.check(); err != nil {
		return Result{}, 0, err
	}
	s := c.exec(ctx, []Op{op}, true).st[0]
	if s.result.ResultOmitted {
		c.fillResult(ctx, op, &s.result)
	}
	return s.result, s.sends, s.err
}

// check refuses an operation before it is sent: an option out of range,
// or no operation at all.
func (o Op) check() error {
	if o.err != nil {
		return o.err
	}
	if o.pb.GetOp() == nil {
		return fmt.Errorf("%w: empty operation", ErrInvalidArgument)
	}
	return nil
}

// result converts the grid's answer to op, which took sends sends (as
// the engine counts them) of a call whose first send the client's clock put
// at start: what the grid said, how the call got it, and the local safe
// deadline of a lease it grants or renews.
func (o Op) result(pb *gridpb.OpResult, start time.Time, sends int) Result {
	r := fromPB(pb)
	r.Sends, r.Resent = sends, sends > 1
	if holdsLease(o.pb, r) {
		r.SafeUntil = safeUntil(start, r, askedLease(o.pb), o.margin)
	}
	return r
}
