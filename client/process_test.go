package client

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/internal/testwait"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestProcessCompletesThenAnswersDuplicates(t *testing.T) {
	start := time.Date(2030, time.January, 1, 12, 0, 0, 0, time.UTC)
	c, _ := dialFake(t, WithClock(func() time.Time { return start })) // the client's clock stands still
	ctx := testCtx(t)
	var runs atomic.Int32
	var seen Lease
	h := func(_ context.Context, l Lease) ([]byte, error) {
		runs.Add(1)
		seen = l
		return []byte("receipt-1"), nil
	}
	out, err := c.Process(ctx, "orders", "o-1", h, WithLease(time.Minute), WithRetention(time.Hour))
	if err != nil || out.Duplicate || string(out.Result) != "receipt-1" || out.Attempt != 1 || out.Token == 0 {
		t.Fatalf("first: %+v %v", out, err)
	}
	if seen.Token != out.Token || seen.Attempt != 1 || seen.Namespace != "orders" || seen.Key != "o-1" {
		t.Fatalf("lease: %+v", seen)
	}
	// Local safe deadline: start + lease - DefaultLeaseMargin (lease/10).
	if want := start.Add(54 * time.Second); !seen.Deadline.Equal(want) {
		t.Fatalf("local deadline %v, want %v: start + 54s", seen.Deadline, want)
	}
	dup, err := c.Process(ctx, "orders", "o-1", h)
	if err != nil || !dup.Duplicate || string(dup.Result) != "receipt-1" {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

func TestProcessHandlerErrorFailsTheKey(t *testing.T) {
	c, f := dialFake(t)
	ctx := testCtx(t)
	boom := errors.New("payment service down")
	out, err := c.Process(ctx, "ns", "k", func(context.Context, Lease) ([]byte, error) {
		return nil, RetryAfter(boom, 2*time.Second)
	})
	if !errors.Is(err, boom) || errors.Is(err, ErrPoisoned) {
		t.Fatalf("err = %v, want the handler's error", err)
	}
	if out.RetryAfter != 2*time.Second {
		t.Fatalf("Processed.RetryAfter = %v, want the 2s the key was failed for", out.RetryAfter)
	}
	g, _ := c.Get(ctx, "ns", "k")
	if g.State != StateFailed || g.Deadline.Sub(g.Now) < time.Second {
		t.Fatalf("record after fail: %+v", g)
	}
	var req *gridpb.FailRequest
	for _, op := range f.received() {
		if op.GetFail() != nil {
			req = op.GetFail()
		}
	}
	if req == nil || req.RetryAfterMs == nil || *req.RetryAfterMs != 2000 || req.GetPoison() {
		t.Fatalf("fail request: %v", req)
	}
	// Within the retry delay the key is busy.
	_, err = c.Process(ctx, "ns", "k", func(context.Context, Lease) ([]byte, error) { return nil, nil })
	var be *BusyError
	if !errors.As(err, &be) || be.RetryAfter <= 0 || be.AfterRetry {
		t.Fatalf("err = %v, want *BusyError", err)
	}
}

func TestProcessPoisonWrapper(t *testing.T) {
	c, _ := dialFake(t)
	ctx := testCtx(t)
	bad := errors.New("unparseable payload")
	_, err := c.Process(ctx, "ns", "k", func(context.Context, Lease) ([]byte, error) {
		return nil, Poison(bad)
	})
	if !errors.Is(err, ErrPoisoned) || !errors.Is(err, bad) {
		t.Fatalf("err = %v, want ErrPoisoned and the handler's error", err)
	}
	_, err = c.Process(ctx, "ns", "k", func(context.Context, Lease) ([]byte, error) { return nil, nil })
	if !errors.Is(err, ErrPoisoned) {
		t.Fatalf("later Process: %v, want ErrPoisoned", err)
	}
}

func TestProcessDefaultBackoffPoisonsAfterMaxAttempts(t *testing.T) {
	c, f := dialFake(t)
	ctx := testCtx(t)
	fail := func(context.Context, Lease) ([]byte, error) { return nil, errors.New("nope") }
	_, err := c.Process(ctx, "ns", "k", fail, WithMaxAttempts(2))
	if err == nil || errors.Is(err, ErrPoisoned) {
		t.Fatalf("attempt 1: %v", err)
	}
	var attempt2 error
	testwait.For(t, 10*time.Second, "the retry delay to pass", func() bool {
		_, attempt2 = c.Process(ctx, "ns", "k", fail, WithMaxAttempts(2))
		return !errors.Is(attempt2, ErrBusy)
	})
	if !errors.Is(attempt2, ErrPoisoned) {
		t.Fatalf("attempt 2: %v, want ErrPoisoned", attempt2)
	}
	for _, op := range f.received() {
		if fl := op.GetFail(); fl != nil && (fl.RetryAfterMs != nil || fl.GetPoison()) {
			t.Fatalf("default Fail must leave the backoff to the grid: %v", fl)
		}
	}
}

func TestProcessRecoversPanic(t *testing.T) {
	c, f := dialFake(t)
	ctx := testCtx(t)
	_, err := c.Process(ctx, "ns", "k", func(context.Context, Lease) ([]byte, error) {
		panic("index out of range")
	})
	var pe *PanicError
	if !errors.Is(err, ErrHandlerPanic) || !errors.As(err, &pe) || pe.Value != "index out of range" || len(pe.Stack) == 0 {
		t.Fatalf("err = %v, want a *PanicError", err)
	}
	if countKind(f.received(), "fail") != 1 {
		t.Fatal("the key was not failed")
	}
	g, _ := c.Get(ctx, "ns", "k")
	if g.State != StateFailed {
		t.Fatalf("state %v, want FAILED", g.State)
	}
}

func TestProcessPanicWithError(t *testing.T) {
	c, _ := dialFake(t)
	cause := errors.New("nil map")
	_, err := c.Process(testCtx(t), "ns", "k", func(context.Context, Lease) ([]byte, error) { panic(cause) })
	if !errors.Is(err, ErrHandlerPanic) || !errors.Is(err, cause) {
		t.Fatalf("err = %v", err)
	}
}

func TestProcessOutcomesAsErrors(t *testing.T) {
	c, _ := dialFake(t)
	ctx := testCtx(t)
	never := func(context.Context, Lease) ([]byte, error) {
		t.Error("handler ran")
		return nil, nil
	}
	// STALE: version 3 of the entity was completed.
	if _, err := c.Process(ctx, "ns", "e-v3", func(context.Context, Lease) ([]byte, error) { return nil, nil }, WithEntity("order-9", 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Process(ctx, "ns", "e-v2", never, WithEntity("order-9", 2)); !errors.Is(err, ErrStale) {
		t.Fatalf("stale: %v", err)
	}
	// MISMATCH: the key is held with another fingerprint.
	if _, err := c.Reserve(ctx, "ns", "fp", WithFingerprint(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Process(ctx, "ns", "fp", never, WithFingerprint(2)); !errors.Is(err, ErrMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	// BUSY: held by another consumer.
	if _, err := c.Reserve(ctx, "ns", "held", WithLease(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Process(ctx, "ns", "held", never)
	var be *BusyError
	if !errors.As(err, &be) || be.RetryAfter < 50*time.Second || be.Attempt != 1 {
		t.Fatalf("busy: %v", err)
	}
}

func TestProcessWaitForHolder(t *testing.T) {
	c, f := dialFake(t)
	ctx := testCtx(t)
	held, err := c.Reserve(ctx, "ns", "k", WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		out Processed
		err error
	}
	done := make(chan answer, 1)
	go func() {
		out, err := c.Process(ctx, "ns", "k", func(context.Context, Lease) ([]byte, error) {
			t.Error("handler ran")
			return nil, nil
		}, WaitForHolder())
		done <- answer{out, err}
	}()
	f.waitOps(t, "the waiting Reserve", func(ops []*gridpb.Op) bool { return countKind(ops, "reserve") == 2 })
	if _, err := c.Complete(ctx, "ns", "k", held.Token, WithResult([]byte("by the holder"))); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || !a.out.Duplicate || string(a.out.Result) != "by the holder" {
		t.Fatalf("process: %+v %v", a.out, a.err)
	}
}

func TestProcessWaitForHolderBoundedByContext(t *testing.T) {
	c, f := dialFake(t)
	if _, err := c.Reserve(testCtx(t), "ns", "k", WithLease(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := c.Process(ctx, "ns", "k", func(context.Context, Lease) ([]byte, error) { return nil, nil }, WaitForHolder())
		done <- err
	}()
	f.waitOps(t, "the waiting Reserve", func(ops []*gridpb.Op) bool { return countKind(ops, "reserve") == 2 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestProcessExtendsTheLease(t *testing.T) {
	c, f := dialFake(t)
	warm(t, c)
	ctx := testCtx(t)
	out, err := c.Process(ctx, "ns", "k", func(ctx context.Context, l Lease) ([]byte, error) {
		// Three extensions, every (lease - margin)/3 = 50 ms: the lease
		// outlives itself.
		f.waitOps(t, "3 extensions", func(ops []*gridpb.Op) bool { return countKind(ops, "extend") >= 3 })
		return []byte("ok"), ctx.Err()
	}, WithLease(300*time.Millisecond))
	if err != nil || string(out.Result) != "ok" {
		t.Fatalf("process: %+v %v", out, err)
	}
	for _, op := range f.received() {
		if e := op.GetExtend(); e != nil && (e.GetToken() != out.Token || e.GetLeaseMs() != 300) {
			t.Fatalf("extend request %v", e)
		}
	}
}

func TestProcessLeaseLostCancelsHandler(t *testing.T) {
	c, f := dialFake(t)
	warm(t, c)
	ctx := testCtx(t)
	var cause error
	_, err := c.Process(ctx, "ns", "k", func(hctx context.Context, l Lease) ([]byte, error) {
		f.steal("ns", "k") // another consumer took over
		<-hctx.Done()
		cause = context.Cause(hctx)
		return nil, hctx.Err()
	}, WithLease(300*time.Millisecond))
	if !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("handler context cause = %v, want ErrLeaseLost", cause)
	}
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("err = %v, want ErrLeaseLost", err)
	}
}

func TestProcessCompleteAfterLostLease(t *testing.T) {
	c, f := dialFake(t)
	_, err := c.Process(testCtx(t), "ns", "k", func(context.Context, Lease) ([]byte, error) {
		f.steal("ns", "k")
		return []byte("done twice?"), nil
	})
	if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "not recorded") {
		t.Fatalf("err = %v, want ErrLeaseLost", err)
	}
}

func TestProcessLocalDeadlineWithoutExtension(t *testing.T) {
	c, f := dialFake(t, fastRetry(1))
	f.setHooks(fakeHooks{op: func(op *gridpb.Op) error {
		if op.GetExtend() != nil {
			return status.Error(codes.Unavailable, "no leader")
		}
		return nil
	}})
	warm(t, c)
	var cause error
	_, err := c.Process(testCtx(t), "ns", "k", func(hctx context.Context, l Lease) ([]byte, error) {
		<-hctx.Done()
		cause = context.Cause(hctx)
		return nil, hctx.Err()
	}, WithLease(300*time.Millisecond))
	if !errors.Is(cause, ErrLeaseLost) || !strings.Contains(cause.Error(), "local safe deadline") {
		t.Fatalf("cause = %v, want the local deadline", cause)
	}
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("err = %v", err)
	}
	if countKind(f.received(), "extend") == 0 {
		t.Fatal("no extension was tried")
	}
}

func TestProcessClockJumpCancelsHandler(t *testing.T) {
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	c, _ := dialFake(t, WithClock(clock))
	var cause error
	_, err := c.Process(testCtx(t), "ns", "k", func(hctx context.Context, l Lease) ([]byte, error) {
		// The lease is an hour; the client's clock jumps two ahead (a
		// suspended VM): without an extension since, the lease is not safe.
		skew.Store(int64(2 * time.Hour))
		<-hctx.Done()
		cause = context.Cause(hctx)
		return nil, hctx.Err()
	}, WithLease(time.Hour), WithLeaseMargin(20*time.Millisecond))
	if !errors.Is(cause, ErrLeaseLost) || !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("cause = %v, err = %v", cause, err)
	}
}

// TestProcessCallerCancelFailsKey: a handler stopped by its caller may
// have applied its effect before it saw the stop (pgx commits with the
// handler's context: PostgreSQL commits, the handler sees an error), so
// the key is failed, the attempt counted, not released for the next
// consumer to run the effect again as attempt 1.
func TestProcessCallerCancelFailsKey(t *testing.T) {
	c, f := dialFake(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	_, err := c.Process(ctx, "ns", "k", func(hctx context.Context, l Lease) ([]byte, error) {
		cancel() // the consumer shuts down
		<-hctx.Done()
		return nil, hctx.Err()
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "may have been applied") {
		t.Fatalf("err = %v", err)
	}
	if countKind(f.received(), "release") != 0 || countKind(f.received(), "fail") != 1 {
		t.Fatal("the key was released, or not failed")
	}
	g, _ := c.Get(testCtx(t), "ns", "k")
	if g.State != StateFailed || g.Attempt != 1 {
		t.Fatalf("state %v attempt %d, want FAILED after attempt 1", g.State, g.Attempt)
	}
}

func TestProcessRejectsBadOptions(t *testing.T) {
	c, f := dialFake(t)
	ok := func(context.Context, Lease) ([]byte, error) { return nil, nil }
	for name, call := range map[string]func() error{
		"nil handler": func() error { _, err := c.Process(testCtx(t), "ns", "k", nil); return err },
		"margin":      func() error { _, err := c.Process(testCtx(t), "ns", "k", ok, WithLeaseMargin(time.Minute)); return err },
		"lease":       func() error { _, err := c.Process(testCtx(t), "ns", "k", ok, WithLease(-1)); return err },
	} {
		if err := call(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(f.received()) != 0 {
		t.Fatal("sent")
	}
}

func TestDirectiveWrappersOfNil(t *testing.T) {
	if RetryAfter(nil, time.Second) != nil || Poison(nil) != nil {
		t.Fatal("wrapping nil must stay nil")
	}
}

// opEntity is the entity an operation names.
func opEntity(op *gridpb.Op) string {
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		return string(o.Reserve.GetEntity())
	case *gridpb.Op_Complete:
		return string(o.Complete.GetEntity())
	case *gridpb.Op_Fail:
		return string(o.Fail.GetEntity())
	case *gridpb.Op_Release:
		return string(o.Release.GetEntity())
	case *gridpb.Op_Extend:
		return string(o.Extend.GetEntity())
	case *gridpb.Op_Get:
		return string(o.Get.GetEntity())
	case *gridpb.Op_Forget:
		return string(o.Forget.GetEntity())
	}
	return ""
}

func TestProcessNamesTheEntityOnEveryOperation(t *testing.T) {
	c, f := dialFake(t)
	warm(t, c)
	ctx := testCtx(t)
	ok := func(context.Context, Lease) ([]byte, error) {
		f.waitOps(t, "an extension", func(ops []*gridpb.Op) bool { return countKind(ops, "extend") >= 1 })
		return nil, nil
	}
	// A 1 s lease is extended 250 ms in and trusted for 750 ms: a shorter
	// one (150 ms: 75 ms trusted) is given up by the keeper, rightly, when
	// a loaded machine stalls the client past its safe deadline before
	// the first extension, and then no extension ever comes.
	if _, err := c.Process(ctx, "ns", "a", ok, WithEntity("order-7", 1), WithLease(time.Second)); err != nil {
		t.Fatal(err)
	}
	fail := func(context.Context, Lease) ([]byte, error) { return nil, errors.New("no") }
	if _, err := c.Process(ctx, "ns", "b", fail, WithEntity("order-7", 2)); err == nil {
		t.Fatal("no error")
	}
	ops := f.received()
	for _, kind := range []string{"reserve", "extend", "complete", "fail"} {
		if countKind(ops, kind) == 0 {
			t.Fatalf("no %s sent", kind)
		}
	}
	for _, op := range ops {
		if kind, _ := wiretap.OpKey(op); opEntity(op) != "order-7" {
			t.Fatalf("%s without the entity: %v", kind, op)
		}
	}
}

func TestCorrelationIDReachesTheHandler(t *testing.T) {
	c, _ := dialFake(t)
	ctx := ContextWithCorrelationID(testCtx(t), "corr-7")
	var seen string
	if _, err := c.Process(ctx, "ns", "corr", func(hctx context.Context, _ Lease) ([]byte, error) {
		seen = CorrelationID(hctx)
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if seen != "corr-7" || CorrelationID(context.Background()) != "" {
		t.Fatalf("handler saw correlation id %q, want corr-7", seen)
	}
}
