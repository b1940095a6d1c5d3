package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// Integration tests against a real in-process grid node (Raft, Pebble, the
// gRPC server), through gridtest.

func dialNode(t *testing.T, n *gridtest.Node, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), n.Addr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestIntegrationOneAcquirerAmong1000(t *testing.T) {
	n := gridtest.Start(t)
	c := dialNode(t, n)
	ctx := testCtx(t)

	const callers = 1000
	var wg sync.WaitGroup
	var acquired, busy atomic.Int32
	errs := make(chan error, callers)
	start := make(chan struct{})
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := c.Reserve(ctx, "race", "the-key", client.WithLease(time.Minute))
			switch {
			case err != nil:
				errs <- err
			case r.Outcome == client.OutcomeAcquired:
				acquired.Add(1)
			case r.Outcome == client.OutcomeBusy && r.RetryAfter > 0:
				busy.Add(1)
			default:
				errs <- fmt.Errorf("unexpected %v", r.Outcome)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if acquired.Load() != 1 || busy.Load() != callers-1 {
		t.Fatalf("%d ACQUIRED, %d BUSY; want 1 and %d", acquired.Load(), busy.Load(), callers-1)
	}
	batches := c.Stats().Batches
	t.Logf("%d calls in %d batches", callers, batches)
	if batches >= callers/2 {
		t.Fatalf("%d Batch RPCs for %d concurrent calls: not coalesced", batches, callers)
	}
}

func TestIntegrationProcess(t *testing.T) {
	n := gridtest.Start(t)
	c := dialNode(t, n)
	ctx := testCtx(t)

	t.Run("complete then duplicate", func(t *testing.T) {
		runs := 0
		h := func(_ context.Context, l client.Lease) ([]byte, error) {
			runs++
			return []byte(fmt.Sprintf("done by %d", l.Token)), nil
		}
		out, err := c.Process(ctx, "it", "dup", h)
		if err != nil || out.Duplicate || out.Attempt != 1 {
			t.Fatalf("first: %+v %v", out, err)
		}
		dup, err := c.Process(ctx, "it", "dup", h)
		if err != nil || !dup.Duplicate || string(dup.Result) != string(out.Result) || dup.CompletedAt.IsZero() {
			t.Fatalf("duplicate: %+v %v", dup, err)
		}
		if runs != 1 {
			t.Fatalf("handler ran %d times", runs)
		}
	})

	t.Run("result too large still completes once", func(t *testing.T) {
		runs := 0
		h := func(_ context.Context, l client.Lease) ([]byte, error) {
			runs++
			return make([]byte, 64<<10+1), nil
		}
		_, err := c.Process(ctx, "it", "big", h, client.WithLease(200*time.Millisecond))
		if !errors.Is(err, client.ErrLimitExceeded) {
			t.Fatalf("oversized result: %v, want ErrLimitExceeded", err)
		}
		again, err := c.Process(ctx, "it", "big", h)
		if err != nil || !again.Duplicate || runs != 1 {
			t.Fatalf("after an oversized result: %+v %v, handler ran %d times", again, err, runs)
		}
	})

	t.Run("a takeover of an expired lease says so", func(t *testing.T) {
		crashed, err := c.Reserve(ctx, "it", "orphan", client.WithLease(200*time.Millisecond))
		if err != nil || crashed.TookOverExpired {
			t.Fatalf("first reserve: %+v %v", crashed, err)
		}
		var seen client.Lease
		out, err := c.Process(ctx, "it", "orphan", func(_ context.Context, l client.Lease) ([]byte, error) {
			seen = l
			return nil, nil
		}, client.WaitForHolder())
		if err != nil || seen.Attempt != 2 || !seen.TookOverExpired || seen.Token <= crashed.Token {
			t.Fatalf("after the holder's lease expired: %+v %v, lease %+v; want attempt 2, taken over from the expired lease", out, err, seen)
		}
	})

	t.Run("failure then retry", func(t *testing.T) {
		attempts := []int{}
		h := func(_ context.Context, l client.Lease) ([]byte, error) {
			if l.TookOverExpired {
				t.Errorf("attempt %d after a Fail reported as a takeover of an expired lease", l.Attempt)
			}
			attempts = append(attempts, l.Attempt)
			if l.Attempt == 1 {
				return nil, client.RetryAfter(errors.New("downstream timeout"), 0)
			}
			return []byte("second time lucky"), nil
		}
		if _, err := c.Process(ctx, "it", "retry", h); err == nil || errors.Is(err, client.ErrPoisoned) {
			t.Fatalf("attempt 1: %v", err)
		}
		g, err := c.Get(ctx, "it", "retry")
		if err != nil || g.State != client.StateFailed {
			t.Fatalf("after attempt 1: %+v %v", g, err)
		}
		out, err := c.Process(ctx, "it", "retry", h)
		if err != nil || string(out.Result) != "second time lucky" || out.Attempt != 2 {
			t.Fatalf("attempt 2: %+v %v", out, err)
		}
		if fmt.Sprint(attempts) != "[1 2]" {
			t.Fatalf("attempts %v", attempts)
		}
	})

	t.Run("poisoned after max attempts", func(t *testing.T) {
		h := func(context.Context, client.Lease) ([]byte, error) {
			return nil, client.RetryAfter(errors.New("always fails"), 0)
		}
		for attempt := 1; attempt <= 3; attempt++ {
			_, err := c.Process(ctx, "it", "poison", h, client.WithMaxAttempts(3))
			if poisoned := errors.Is(err, client.ErrPoisoned); err == nil || poisoned != (attempt == 3) {
				t.Fatalf("attempt %d: %v", attempt, err)
			}
		}
		_, err := c.Process(ctx, "it", "poison", func(context.Context, client.Lease) ([]byte, error) {
			t.Error("handler ran on a poisoned key")
			return nil, nil
		}, client.WithMaxAttempts(3))
		if !errors.Is(err, client.ErrPoisoned) {
			t.Fatalf("after poisoning: %v", err)
		}
	})

	t.Run("panic fails the key", func(t *testing.T) {
		_, err := c.Process(ctx, "it", "panic", func(context.Context, client.Lease) ([]byte, error) { panic("boom") })
		if !errors.Is(err, client.ErrHandlerPanic) {
			t.Fatalf("err = %v", err)
		}
		if g, _ := c.Get(ctx, "it", "panic"); g.State != client.StateFailed || g.Attempt != 1 {
			t.Fatalf("record %+v", g)
		}
	})

	t.Run("entity versions", func(t *testing.T) {
		ok := func(context.Context, client.Lease) ([]byte, error) { return []byte("v"), nil }
		if _, err := c.Process(ctx, "it", "order-1/v2", ok, client.WithEntity("order-1", 2)); err != nil {
			t.Fatalf("v2: %v", err)
		}
		if _, err := c.Process(ctx, "it", "order-1/v1", ok, client.WithEntity("order-1", 1)); !errors.Is(err, client.ErrStale) {
			t.Fatalf("v1 after v2: %v, want ErrStale", err)
		}
		if _, err := c.Process(ctx, "it", "order-1/v3", ok, client.WithEntity("order-1", 3)); err != nil {
			t.Fatalf("v3: %v", err)
		}
		g, err := c.Get(ctx, "it", "order-1/v3", client.ForEntity("order-1"))
		if err != nil || g.State != client.StateCompleted {
			t.Fatalf("get with entity: %+v %v", g, err)
		}
	})

	t.Run("fingerprint mismatch", func(t *testing.T) {
		ok := func(context.Context, client.Lease) ([]byte, error) { return nil, nil }
		if _, err := c.Process(ctx, "it", "fp", ok, client.WithFingerprint(0xaaaa)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Process(ctx, "it", "fp", ok, client.WithFingerprint(0xbbbb)); !errors.Is(err, client.ErrMismatch) {
			t.Fatalf("err = %v, want ErrMismatch", err)
		}
	})

	t.Run("busy, then wait for the holder", func(t *testing.T) {
		held, err := c.Reserve(ctx, "it", "held", client.WithLease(200*time.Millisecond))
		if err != nil || held.Outcome != client.OutcomeAcquired {
			t.Fatalf("reserve: %+v %v", held, err)
		}
		ok := func(_ context.Context, l client.Lease) ([]byte, error) { return []byte("taken over"), nil }
		_, err = c.Process(ctx, "it", "held", ok)
		var be *client.BusyError
		if !errors.As(err, &be) || be.RetryAfter <= 0 || be.RetryAfter > 200*time.Millisecond {
			t.Fatalf("err = %v, want *BusyError", err)
		}
		// The holder never settles: its lease runs out and the waiter takes
		// over as attempt 2.
		out, err := c.Process(ctx, "it", "held", ok, client.WaitForHolder())
		if err != nil || out.Attempt != 2 {
			t.Fatalf("wait: %+v %v", out, err)
		}
		if _, err := c.Complete(ctx, "it", "held", held.Token); !errors.Is(err, client.ErrLeaseLost) {
			t.Fatalf("zombie complete: %v, want ErrLeaseLost", err)
		}
	})
}

func TestIntegrationLeaseIsExtended(t *testing.T) {
	n := gridtest.Start(t)
	c := dialNode(t, n)
	other := dialNode(t, n)
	ctx := testCtx(t)
	const lease = 300 * time.Millisecond
	warm(t, c) // the connection's setup would come off the short lease
	out, err := c.Process(ctx, "it", "long", func(hctx context.Context, l client.Lease) ([]byte, error) {
		first, err := c.Get(ctx, "it", "long")
		if err != nil {
			return nil, err
		}
		// Outlive the lease three times over by the grid's clock.
		var r client.Result
		testwait.For(t, 10*time.Second, "three leases to pass", func() bool {
			r, err = other.Reserve(ctx, "it", "long")
			return err != nil || r.Now.Sub(first.Now) > 3*lease
		})
		if err != nil || r.Outcome != client.OutcomeBusy {
			return nil, fmt.Errorf("another consumer got %v, %v", r.Outcome, err)
		}
		return []byte("still mine"), hctx.Err()
	}, client.WithLease(lease))
	if err != nil || string(out.Result) != "still mine" {
		t.Fatalf("process: %+v %v", out, err)
	}
}

func TestIntegrationInvalidInput(t *testing.T) {
	n := gridtest.Start(t)
	for _, batching := range []bool{true, false} {
		c := dialNode(t, n, client.WithBatching(batching))
		ctx := testCtx(t)
		_, err := c.Reserve(ctx, "it", string(make([]byte, 2000)))
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "limit 1024") {
			t.Fatalf("long key: %v", err)
		}
		_, err = c.Reserve(ctx, "it", "k", client.WithLease(time.Millisecond))
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "lease") {
			t.Fatalf("short lease: %v", err)
		}
		_, err = c.Reserve(ctx, "Bad Namespace", "k")
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("namespace: %v", err)
		}
		r, err := c.Reserve(ctx, "it", fmt.Sprint("big-result-", batching))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Complete(ctx, "it", fmt.Sprint("big-result-", batching), r.Token, client.WithResult(make([]byte, 65<<10)))
		if !errors.Is(err, client.ErrLimitExceeded) {
			t.Fatalf("big result: %v", err)
		}
	}
}

func TestIntegrationSurvivesRestart(t *testing.T) {
	n := gridtest.Start(t)
	c := dialNode(t, n, client.WithRetryPolicy(client.RetryPolicy{Attempts: 40, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 250 * time.Millisecond}))
	ctx := testCtx(t)
	r, err := c.Reserve(ctx, "it", "durable", client.WithLease(time.Minute))
	if err != nil || r.Outcome != client.OutcomeAcquired {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	n.Restart()
	// The same connection reconnects; the lease survived the restart.
	if _, err := c.Complete(ctx, "it", "durable", r.Token, client.WithResult([]byte("ok"))); err != nil {
		t.Fatalf("complete after restart: %v", err)
	}
	again, err := c.Reserve(ctx, "it", "durable")
	if err != nil || again.Outcome != client.OutcomeDuplicate || string(again.Result) != "ok" {
		t.Fatalf("after restart: %+v %v", again, err)
	}
	// Tokens keep growing per key across the restart.
	if _, err := c.Forget(ctx, "it", "durable"); err != nil {
		t.Fatal(err)
	}
	next, err := c.Reserve(ctx, "it", "durable")
	if err != nil || next.Outcome != client.OutcomeAcquired || next.Token <= r.Token {
		t.Fatalf("token %d after restart, want > %d (%v)", next.Token, r.Token, err)
	}
}
