package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors, compared with errors.Is. Errors returned by the client wrap
// them, keeping the grid's message (which names the limit that was hit).
var (
	// ErrLeaseLost: the token was superseded or the key is no longer
	// PROCESSING. A holder must stop and must not settle.
	ErrLeaseLost = errors.New("client: lease lost")
	// ErrLeaseExpired: Process got its lease too late to trust it: the
	// Reserve's answer came at or after the lease's local safe deadline.
	// The handler did not run and the key was released; redeliver the
	// message.
	ErrLeaseExpired = errors.New("client: lease expired before the handler started")
	// ErrBusy: another holder has the key, or its retry delay runs. The
	// concrete error is a *BusyError.
	ErrBusy = errors.New("client: busy")
	// ErrPoisoned: the key failed too often; route the message to a
	// dead-letter queue.
	ErrPoisoned = errors.New("client: poisoned")
	// ErrStale: the entity version is not newer than the committed one; ack
	// and drop the message.
	ErrStale = errors.New("client: stale")
	// ErrMismatch: the key was reserved with a different payload fingerprint.
	ErrMismatch = errors.New("client: fingerprint mismatch")
	// ErrInvalidArgument: the grid (or the client) refused the input
	// (gRPC InvalidArgument). Never retried.
	ErrInvalidArgument = errors.New("client: invalid argument")
	// ErrLimitExceeded: a batch or request was too large (gRPC
	// ResourceExhausted). Never retried.
	ErrLimitExceeded = errors.New("client: limit exceeded")
	// ErrUnavailable: the shard has no leader, the node is shutting down or
	// cannot be reached (gRPC Unavailable). Retried by the client.
	ErrUnavailable = errors.New("client: unavailable")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrHandlerPanic: a Process handler panicked. The concrete error is a
	// *PanicError.
	ErrHandlerPanic = errors.New("client: handler panicked")

	// errUnknown labels the failure of a call one of whose sends may have
	// been applied: what became of the operation is not known.
	errUnknown = errors.New("client: outcome unknown")
	// errNotSent labels the failure of a call none of whose sends left
	// the client: nothing was applied.
	errNotSent = errors.New("client: not sent")

	// errProtocol: the server answered something this client cannot read.
	errProtocol = errors.New("client: protocol error")
)

// BusyError is the error of a BUSY outcome. It matches ErrBusy.
type BusyError struct {
	// RetryAfter is how long until the holder's lease or the retry delay ends.
	RetryAfter time.Duration
	// Attempt is the attempt number of the current holder or of the last
	// failed attempt.
	Attempt int
	// AfterRetry reports that the Reserve was resent after a transport
	// failure (Result.Resent). Its first send may have been granted, so the
	// lease that makes the key busy may be this caller's own, whose token
	// was never received. That lease expires after RetryAfter and then
	// counts as a failed attempt. A grid that keeps request ids answers
	// such a resend with the grant itself (Result.Replayed), so AfterRetry
	// is left for grids that ignore them, and for a key another consumer
	// really took meanwhile.
	AfterRetry bool
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("client: busy (attempt %d), retry after %v", e.Attempt, e.RetryAfter)
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// PanicError is the error Process returns when the handler panicked. It
// matches ErrHandlerPanic, and the panic value too when that is an error.
type PanicError struct {
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("%v: %v", ErrHandlerPanic, e.Value)
}

// Unwrap returns ErrHandlerPanic and the panic value when it is an error.
func (e *PanicError) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{ErrHandlerPanic, err}
	}
	return []error{ErrHandlerPanic}
}

// rpcError is a call refused by the grid with a gRPC status. It unwraps to
// the sentinel of its code (none for codes the protocol does not use), keeps
// the server's message, and still answers status.Code / status.FromError.
type rpcError struct {
	sentinel error
	code     codes.Code
	msg      string
	// redirect is set when a node refused the operation because it does not
	// lead the operation's shard: the operation was not applied.
	redirect *gridpb.Redirect
}

func (e *rpcError) Error() string {
	if e.sentinel == nil {
		return fmt.Sprintf("client: grid error %v: %s", e.code, e.msg)
	}
	if e.msg == "" {
		return e.sentinel.Error()
	}
	return e.sentinel.Error() + ": " + e.msg
}

func (e *rpcError) Unwrap() error { return e.sentinel }

// GRPCStatus lets status.FromError and status.Code see the original status.
func (e *rpcError) GRPCStatus() *status.Status { return status.New(e.code, e.msg) }

// sentinelOf is the single mapping from gRPC status codes to client errors
// (the reverse of the mapping in package api).
func sentinelOf(c codes.Code) error {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange:
		return ErrInvalidArgument
	case codes.ResourceExhausted:
		return ErrLimitExceeded
	case codes.Unavailable:
		return ErrUnavailable
	case codes.DeadlineExceeded:
		return context.DeadlineExceeded
	case codes.Canceled:
		return context.Canceled
	default:
		return nil
	}
}

// fromCode maps a status code and message, as found in a gRPC error or in the
// OpError of one operation of a batch.
func fromCode(c codes.Code, msg string) error {
	if c == codes.OK {
		return nil
	}
	return &rpcError{sentinel: sentinelOf(c), code: c, msg: msg}
}

// fromOpError maps the refusal of one operation of a batch, keeping its
// Redirect.
func fromOpError(e *gridpb.OpError) error {
	err := fromCode(codes.Code(e.GetCode()), e.GetMessage())
	if re, ok := err.(*rpcError); ok {
		re.redirect = e.GetRedirect()
	}
	return err
}

// redirectOf returns the Redirect an error carries, or nil: a node that does
// not lead the operation's shard refused it without applying it. It is
// asked of every answer: a nil err returns before errors.As, whose target
// would cost an allocation.
func redirectOf(err error) *gridpb.Redirect {
	if err == nil {
		return nil
	}
	var re *rpcError
	if errors.As(err, &re) {
		return re.redirect
	}
	return nil
}

// unsentError is the failure of a request that never left the client: no
// connection took it (refused, still connecting when the send's deadline
// came, queued in a batcher). Nothing was applied.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// unsent marks err as the failure of a request that never left.
func unsent(err error) error {
	if err == nil || neverSent(err) {
		return err
	}
	return &unsentError{err: err}
}

// neverSent reports an error of a request that never left the client.
func neverSent(err error) bool {
	var u *unsentError
	return errors.As(err, &u)
}

// fromRPC maps an error of a gRPC call. ctx is the caller's context: when it
// is done, its error wins over the status the transport made of it. An
// error marked unsent stays marked.
func fromRPC(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if u, ok := err.(*unsentError); ok {
		if ctx.Err() != nil {
			return unsent(ctxDone(ctx))
		}
		return unsent(fromRPC(ctx, u.err))
	}
	if ctx.Err() != nil {
		return ctxErr(ctx)
	}
	st, ok := status.FromError(err)
	if !ok {
		return err // the client's own error, already mapped
	}
	mapped := fromCode(st.Code(), st.Message())
	if re, ok := mapped.(*rpcError); ok && st.Code() == codes.Unavailable {
		// A single RPC carries its Redirect as a status detail.
		for _, d := range st.Details() {
			if rd, ok := d.(*gridpb.Redirect); ok {
				re.redirect = rd
				break
			}
		}
	}
	return mapped
}

// ctxErr is the error of a call whose context ended before its answer came:
// the operation may or may not have taken effect on the grid.
func ctxErr(ctx context.Context) error {
	return fmt.Errorf("%w: %w", errUnknown, ctxDone(ctx))
}

// ctxDone is the error of an ended context with its cause, if it has one.
func ctxDone(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}

// refusedUnapplied reports a refusal that proves nothing was applied: a
// Redirect (the node does not lead the shard, or cannot serve at all:
// starting, not a member, removed), or a request that never left.
func refusedUnapplied(err error) bool {
	return redirectOf(err) != nil || neverSent(err)
}

// retryable reports whether a failed call may be sent again: the grid was
// unavailable (no leader, shutting down, or not reachable).
func retryable(err error) bool {
	return errors.Is(err, ErrUnavailable)
}
