package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Tests of the local safe deadline against a real node: the Reserve's
// answer, Process before its handler and before its settle.

// opsOf returns the operations of a unary RPC's request: a Batch's, or the
// one of a single-operation RPC; or those a stream's answer frame answers
// (frameHook).
func opsOf(req any) []*gridpb.Op {
	switch r := req.(type) {
	case *gridpb.BatchRequest:
		return r.GetOps()
	case *gridpb.StreamRequest:
		return r.GetOps()
	case *gridpb.ReserveRequest:
		return []*gridpb.Op{{Op: &gridpb.Op_Reserve{Reserve: r}}}
	case *gridpb.ExtendRequest:
		return []*gridpb.Op{{Op: &gridpb.Op_Extend{Extend: r}}}
	}
	return nil
}

// carries reports whether an RPC's request holds an operation of kind.
func carries(req any, kind string) bool {
	for _, op := range opsOf(req) {
		if k, _ := opKey(op); k == kind {
			return true
		}
	}
	return false
}

// intercept is a client-side hook around every unary RPC to the real node,
// and every answer frame of a stream: after runs once the node answered
// (the operations were applied) and may delay the answer or replace it
// with an error. For a stream frame, req is a StreamRequest of the
// operations the frame answers and reply the frame; an error breaks the
// stream, as a connection reset would.
func intercept(after func(ctx context.Context, method string, req, reply any, err error) error) Option {
	return WithDialOptions(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			return after(ctx, method, req, reply, err)
		}), grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return cs, err
			}
			return &frameHook{ClientStream: cs, method: method, after: after, sent: map[uint64]*gridpb.Op{}}, nil
		}))
}

// frameHook is intercept's hook on a stream: it keeps the operations sent
// by id, and shows after each answer frame with the operations it answers.
type frameHook struct {
	grpc.ClientStream
	method string
	after  func(ctx context.Context, method string, req, reply any, err error) error
	mu     sync.Mutex
	sent   map[uint64]*gridpb.Op
}

func (h *frameHook) SendMsg(m any) error {
	if req, ok := m.(*gridpb.StreamRequest); ok {
		h.mu.Lock()
		for i, id := range req.GetIds() {
			h.sent[id] = req.GetOps()[i]
		}
		h.mu.Unlock()
	}
	return h.ClientStream.SendMsg(m)
}

func (h *frameHook) RecvMsg(m any) error {
	err := h.ClientStream.RecvMsg(m)
	resp, ok := m.(*gridpb.StreamResponse)
	if err != nil || !ok {
		return err
	}
	answered := &gridpb.StreamRequest{Ids: resp.GetIds()}
	h.mu.Lock()
	for _, id := range resp.GetIds() {
		answered.Ops = append(answered.Ops, h.sent[id])
		delete(h.sent, id)
	}
	h.mu.Unlock()
	return h.after(h.Context(), h.method, answered, resp, nil)
}

// warm connects c to its node before a test with a short lease: a lease's
// safe window runs from before the Reserve's first send, and setting up the
// connection (over 100 ms under -race on a loaded machine) would come off
// it, leaving a 300 ms lease's first extension (150 ms of it kept as
// margin) too little time, or its Reserve answered too late to run.
func warm(t *testing.T, c *Client) {
	t.Helper()
	if _, err := c.Status(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

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
		c := dialNode(t, n, WithBatching(batching), intercept(func(_ context.Context, _ string, req, _ any, err error) error {
			if err != nil || !carries(req, "reserve") || !held.CompareAndSwap(false, true) {
				return err
			}
			holdErr = untilHeld(func() bool {
				r, err := other.Reserve(ctx, "ns", "k", WithLease(time.Minute))
				second.Store(r.Token)
				return err == nil && r.Outcome == OutcomeAcquired
			})
			return nil
		}))
		ran := false
		out, err := c.Process(ctx, "ns", "k", func(hctx context.Context, l Lease) ([]byte, error) {
			ran = true
			t.Errorf("handler started past the safe deadline %v (ctx.Err() = %v) while another consumer holds the key",
				l.Deadline, hctx.Err())
			return []byte("twice"), nil
		}, WithLease(100*time.Millisecond))
		if holdErr != nil {
			t.Fatal(holdErr)
		}
		if ran {
			return
		}
		if !errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrLeaseLost) {
			t.Fatalf("err = %v, want ErrLeaseExpired", err)
		}
		if out.Token == 0 || out.Token == second.Load() || out.Attempt != 1 {
			t.Fatalf("processed %+v: want the first lease's token and attempt", out)
		}
		g, err := c.Get(ctx, "ns", "k", WithShowToken())
		if err != nil || g.State != StateProcessing || g.Token != second.Load() || g.Attempt != 2 {
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
	c := dialNode(t, n, WithClock(clock), intercept(func(_ context.Context, _ string, req, _ any, err error) error {
		if carries(req, "reserve") {
			skew.Store(int64(2 * time.Minute))
		}
		return err
	}))
	_, err := c.Process(ctx, "ns", "k", func(context.Context, Lease) ([]byte, error) {
		t.Error("handler ran past the safe deadline")
		return nil, nil
	}, WithLease(time.Minute))
	if !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("err = %v, want ErrLeaseExpired", err)
	}
	g, err := c.Get(ctx, "ns", "k")
	if err != nil || g.State != StateAbsent {
		t.Fatalf("get: %+v %v; want the key released", g, err)
	}
	r, err := c.Reserve(ctx, "ns", "k")
	if err != nil || r.Outcome != OutcomeAcquired || r.Attempt != 1 {
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
		out, err := c.Process(testCtx(t), "ns", "k", func(context.Context, Lease) ([]byte, error) {
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
		c := dialNode(t, n, WithClock(clock))
		var cause error
		out, err := c.Process(ctx, "ns", "k", func(hctx context.Context, l Lease) ([]byte, error) {
			skew.Store(int64(2 * time.Hour)) // the client's clock jumps past the lease
			<-hctx.Done()
			cause = context.Cause(hctx)
			return []byte("late"), nil // and the handler ignores its context
		}, WithLease(time.Hour))
		if !errors.Is(cause, ErrLeaseLost) {
			t.Fatalf("handler context cause %v, want the local safe deadline", cause)
		}
		if err != nil || !out.Overran || string(out.Result) != "late" {
			t.Fatalf("process: %+v %v; want completed, overran", out, err)
		}
		g, err := c.Get(ctx, "ns", "k", WithShowToken())
		if err != nil || g.State != StateCompleted || g.Token != out.Token {
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
		c := dialNode(t, n, WithRetryPolicy(RetryPolicy{Attempts: 1}), WithStreaming(false),
			WithDialOptions(grpc.WithChainUnaryInterceptor(
				func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
					if carries(req, "extend") {
						return status.Error(codes.Unavailable, "test: extension dropped")
					}
					return invoker(ctx, method, req, reply, cc, opts...)
				})))
		warm(t, c)
		var second uint64
		out, err := c.Process(ctx, "ns", "k", func(hctx context.Context, l Lease) ([]byte, error) {
			<-hctx.Done() // the local safe deadline, no extension having succeeded
			if err := untilHeld(func() bool {
				r, err := other.Reserve(ctx, "ns", "k", WithLease(time.Minute))
				second = r.Token
				return err == nil && r.Outcome == OutcomeAcquired
			}); err != nil {
				t.Error(err)
			}
			return []byte("late"), nil
		}, WithLease(200*time.Millisecond))
		if !errors.Is(err, ErrLeaseLost) || !out.Overran {
			t.Fatalf("process: %+v %v; want ErrLeaseLost and overran", out, err)
		}
		g, err := c.Get(ctx, "ns", "k", WithShowToken())
		if err != nil || g.State != StateProcessing || g.Token != second {
			t.Fatalf("get: %+v %v; want the second consumer's lease", g, err)
		}
	})
}

// untilHeld waits, without failing the test (it may run outside the test's
// goroutine), until cond says a second consumer holds the key.
func untilHeld(cond func() bool) error {
	if !testwait.Holds(10*time.Second, cond) {
		return errors.New("timed out waiting for a second consumer holding the key")
	}
	return nil
}
