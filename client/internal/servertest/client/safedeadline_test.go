package client_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/internal/gridtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Tests of the local safe deadline against a real node: the Reserve's
// answer, Process before its handler and before its settle.

// TestProcessDoesNotStartPastTheSafeDeadline: the answer to Process's
// Reserve is held up (a slow network path) until the lease has expired on
// the grid and a second consumer holds the key. The handler must not run:
// the lease is past its local safe deadline when the answer arrives. Before
// the fix, Process called the handler anyway, with its context not yet
// cancelled, while the second consumer held the key.
func TestProcessDoesNotStartPastTheSafeDeadline(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		n := gridtest.Start(t)
		ctx := testCtx(t)
		other := dialNode(t, n)
		var held atomic.Bool
		var second atomic.Uint64 // the second consumer's token
		var holdErr error
		c := dialNode(t, n, client.WithBatching(batching), intercept(func(_ context.Context, _ string, req, _ any, err error) error {
			if err != nil || !wiretap.Carries(req, "reserve") || !held.CompareAndSwap(false, true) {
				return err
			}
			holdErr = untilHeld(func() bool {
				r, err := other.Reserve(ctx, "ns", "k", client.WithLease(time.Minute))
				second.Store(r.Token)
				return err == nil && r.Outcome == client.OutcomeAcquired
			})
			return nil
		}))
		ran := false
		out, err := c.Process(ctx, "ns", "k", func(hctx context.Context, l client.Lease) ([]byte, error) {
			ran = true
			t.Errorf("handler started past the safe deadline %v (ctx.Err() = %v) while another consumer holds the key",
				l.Deadline, hctx.Err())
			return []byte("twice"), nil
		}, client.WithLease(100*time.Millisecond))
		if holdErr != nil {
			t.Fatal(holdErr)
		}
		if ran {
			return
		}
		if !errors.Is(err, client.ErrLeaseExpired) || errors.Is(err, client.ErrLeaseLost) {
			t.Fatalf("err = %v, want ErrLeaseExpired", err)
		}
		if out.Token == 0 || out.Token == second.Load() || out.Attempt != 1 {
			t.Fatalf("processed %+v: want the first lease's token and attempt", out)
		}
		g, err := c.Get(ctx, "ns", "k", client.WithShowToken())
		if err != nil || g.State != client.StateProcessing || g.Token != second.Load() || g.Attempt != 2 {
			t.Fatalf("get: %+v %v; want the second consumer's lease, untouched", g, err)
		}
	})
}

// TestProcessReleasesALeaseTooLateToTrust: the Reserve's answer arrives
// after the lease's local safe deadline by the client's clock (it jumped,
// as in a suspended VM) while the grid's lease still runs. The handler does
// not run and the key is released at once, without counting an attempt:
// the next consumer gets attempt 1 and no lease has to expire.
func TestProcessReleasesALeaseTooLateToTrust(t *testing.T) {
	n := gridtest.Start(t)
	ctx := testCtx(t)
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	c := dialNode(t, n, client.WithClock(clock), intercept(func(_ context.Context, _ string, req, _ any, err error) error {
		if wiretap.Carries(req, "reserve") {
			skew.Store(int64(2 * time.Minute))
		}
		return err
	}))
	_, err := c.Process(ctx, "ns", "k", func(context.Context, client.Lease) ([]byte, error) {
		t.Error("handler ran past the safe deadline")
		return nil, nil
	}, client.WithLease(time.Minute))
	if !errors.Is(err, client.ErrLeaseExpired) {
		t.Fatalf("err = %v, want ErrLeaseExpired", err)
	}
	g, err := c.Get(ctx, "ns", "k")
	if err != nil || g.State != client.StateAbsent {
		t.Fatalf("get: %+v %v; want the key released", g, err)
	}
	r, err := c.Reserve(ctx, "ns", "k")
	if err != nil || r.Outcome != client.OutcomeAcquired || r.Attempt != 1 {
		t.Fatalf("reserve after the release: %+v %v; want attempt 1", r, err)
	}
}

// TestProcessReportsAnOverrun: a handler that returns after the lease's
// local safe deadline is reported (Processed.Overran), and its settle is
// still sent, fenced by the token: accepted while nobody took over, refused
// with ErrLeaseLost once a second consumer holds the key.
func TestProcessReportsAnOverrun(t *testing.T) {
	t.Run("in time", func(t *testing.T) {
		c := dialNode(t, gridtest.Start(t))
		out, err := c.Process(testCtx(t), "ns", "k", func(context.Context, client.Lease) ([]byte, error) {
			return []byte("ok"), nil
		})
		if err != nil || out.Overran {
			t.Fatalf("process: %+v %v; want no overrun", out, err)
		}
	})
	t.Run("nobody took over", func(t *testing.T) {
		n := gridtest.Start(t)
		ctx := testCtx(t)
		var skew atomic.Int64
		clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		c := dialNode(t, n, client.WithClock(clock))
		var cause error
		out, err := c.Process(ctx, "ns", "k", func(hctx context.Context, l client.Lease) ([]byte, error) {
			skew.Store(int64(2 * time.Hour)) // the client's clock jumps past the lease
			<-hctx.Done()
			cause = context.Cause(hctx)
			return []byte("late"), nil // and the handler ignores its context
		}, client.WithLease(time.Hour))
		if !errors.Is(cause, client.ErrLeaseLost) {
			t.Fatalf("handler context cause %v, want the local safe deadline", cause)
		}
		if err != nil || !out.Overran || string(out.Result) != "late" {
			t.Fatalf("process: %+v %v; want completed, overran", out, err)
		}
		g, err := c.Get(ctx, "ns", "k", client.WithShowToken())
		if err != nil || g.State != client.StateCompleted || g.Token != out.Token {
			t.Fatalf("get: %+v %v; want completed under the token", g, err)
		}
	})
	t.Run("a second consumer took over", func(t *testing.T) {
		n := gridtest.Start(t)
		ctx := testCtx(t)
		other := dialNode(t, n)
		// Extensions are lost (applied nowhere: refused before they leave),
		// so the grid's lease runs out while the handler runs. The refusal
		// is a unary RPC's: batches go as Batch RPCs here, not on a stream.
		c := dialNode(t, n, client.WithRetryPolicy(client.RetryPolicy{Attempts: 1}), client.WithStreaming(false),
			client.WithDialOptions(grpc.WithChainUnaryInterceptor(
				func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
					if wiretap.Carries(req, "extend") {
						return status.Error(codes.Unavailable, "test: extension dropped")
					}
					return invoker(ctx, method, req, reply, cc, opts...)
				})))
		warm(t, c)
		var second uint64
		out, err := c.Process(ctx, "ns", "k", func(hctx context.Context, l client.Lease) ([]byte, error) {
			<-hctx.Done() // the local safe deadline, no extension having succeeded
			if err := untilHeld(func() bool {
				r, err := other.Reserve(ctx, "ns", "k", client.WithLease(time.Minute))
				second = r.Token
				return err == nil && r.Outcome == client.OutcomeAcquired
			}); err != nil {
				t.Error(err)
			}
			return []byte("late"), nil
		}, client.WithLease(200*time.Millisecond))
		if !errors.Is(err, client.ErrLeaseLost) || !out.Overran {
			t.Fatalf("process: %+v %v; want ErrLeaseLost and overran", out, err)
		}
		g, err := c.Get(ctx, "ns", "k", client.WithShowToken())
		if err != nil || g.State != client.StateProcessing || g.Token != second {
			t.Fatalf("get: %+v %v; want the second consumer's lease", g, err)
		}
	})
}
