package check

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/l4xg/grid/client"
)

// Executor runs one operation against the grid. Do returns the answer, or
// an Output with Unknown set when the operation may or may not have taken
// effect; its error is for answers that say the test itself is wrong (the
// grid refused the input as invalid).
type Executor interface {
	Do(ctx context.Context, in Input) (Output, error)
}

// ClientExecutor runs operations through a client.Client in namespace NS.
// The client must send each operation at most once (client.WithRetryPolicy
// with Attempts 1): a resend after a lost answer would make one recorded
// operation two transitions of the grid (a Reserve granted, then BUSY on its
// own lease), which the model does not allow.
type ClientExecutor struct {
	C  *client.Client
	NS string
}

var _ Executor = ClientExecutor{}

// Do implements Executor.
func (e ClientExecutor) Do(ctx context.Context, in Input) (Output, error) {
	var (
		r   client.Result
		err error
	)
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	switch in.Kind {
	case KindReserve:
		opts := []client.ReserveOption{client.WithLease(ms(in.Lease)), client.WithMaxAttempts(in.MaxAttempts)}
		if in.Retention > 0 {
			opts = append(opts, client.WithPoisonRetention(ms(in.Retention)))
		}
		r, err = e.C.Reserve(ctx, e.NS, in.Key, opts...)
	case KindComplete:
		opts := []client.CompleteOption{client.WithResult([]byte(in.Result))}
		if in.Retention > 0 {
			opts = append(opts, client.WithRetention(ms(in.Retention)))
		}
		r, err = e.C.Complete(ctx, e.NS, in.Key, in.Token, opts...)
	case KindFail:
		var opts []client.FailOption
		if in.Poison {
			opts = append(opts, client.WithPoison())
		}
		if in.RetryAfter > 0 {
			opts = append(opts, client.WithRetryAfter(ms(in.RetryAfter)))
		}
		if in.Retention > 0 {
			opts = append(opts, client.WithRetention(ms(in.Retention)))
		}
		r, err = e.C.Fail(ctx, e.NS, in.Key, in.Token, opts...)
	case KindExtend:
		r, err = e.C.Extend(ctx, e.NS, in.Key, in.Token, ms(in.Lease))
	case KindRelease:
		r, err = e.C.Release(ctx, e.NS, in.Key, in.Token)
	case KindGet:
		r, err = e.C.Get(ctx, e.NS, in.Key)
	case KindForget:
		r, err = e.C.Forget(ctx, e.NS, in.Key)
	default:
		return Output{}, fmt.Errorf("check: unknown operation %v", in.Kind)
	}
	return Classify(r, err)
}

// Classify turns what a client call returned into an Output. An answer
// (including LEASE_LOST, which the client also returns as ErrLeaseLost) is
// known; a refusal of the input is an error; anything else (outcome unknown,
// unavailable, closed: the operation may have been sent) is Unknown. So is
// a refusal for capacity (ResourceExhausted: a node below its disk reserve
// during a full-disk fault refuses Reserves): the grid applied nothing, and
// an open end is the weaker, always safe, account of that.
func Classify(r client.Result, err error) (Output, error) {
	switch {
	case err == nil, errors.Is(err, client.ErrLeaseLost) && r.Outcome == client.OutcomeLeaseLost:
		return OutputOf(r), nil
	case errors.Is(err, client.ErrInvalidArgument):
		return Output{}, err
	default:
		return Output{Unknown: true, Cause: err.Error()}, nil
	}
}
