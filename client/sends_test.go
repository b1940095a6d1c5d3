package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Tests of what results say about their sends, against the fake (the
// tests against real nodes are in client/internal/servertest/client).

// fastResend resends after a few milliseconds, as the default policy does
// after 25 ms.
var fastResend = WithRetryPolicy(RetryPolicy{Attempts: 5, BaseBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond})

// nil2 is a handler that must not run.
func nil2(context.Context, Lease) ([]byte, error) {
	return nil, errors.New("handler ran for a duplicate")
}

// TestProcessBusyAfterAResendIsAfterRetry: against a grid that ignores
// request ids, a Process whose Reserve was granted but whose answer was
// lost finds its own lease on the resend, reported as AfterRetry.
func TestProcessBusyAfterAResendIsAfterRetry(t *testing.T) {
	c, f := dialFake(t, fastRetry(3))
	f.ignoreRequestIDs()
	var lost bool
	var mu sync.Mutex
	f.setHooks(fakeHooks{after: func(op *gridpb.Op, _ *gridpb.OpResult) error {
		mu.Lock()
		defer mu.Unlock()
		if op.GetReserve() != nil && !lost {
			lost = true
			return status.Error(codes.Unavailable, "connection reset")
		}
		return nil
	}})
	out, err := c.Process(testCtx(t), "ns", "k", nil2)
	var be *BusyError
	if !errors.As(err, &be) || !be.AfterRetry || out.ReserveSends != 2 || !out.Resent {
		t.Fatalf("process: %+v %v; want a *BusyError with AfterRetry after 2 sends", out, err)
	}
	ids := map[string]bool{}
	for _, op := range f.received() {
		if r := op.GetReserve(); r != nil {
			ids[string(r.GetRequestId())] = true
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%d request ids for one Process; want 1", len(ids))
	}
}

// TestRedirectedSendIsNotCounted: a send refused with a Redirect proves
// nothing was applied, so the operation redirected to its leader and
// answered there took one send and is not resent.
func TestRedirectedSendIsNotCounted(t *testing.T) {
	fc := newFakeCluster(t, 3, 3)
	c := fc.dial(t, "")
	ctx := testCtx(t)
	key := fc.keyOn(0, 0)
	if _, err := c.Get(ctx, "ns", key); err != nil { // the client learns the map
		t.Fatal(err)
	}
	fc.move(0, 1, false) // the map still names the old leader
	r, err := c.Reserve(ctx, "ns", key)
	if err != nil || r.Outcome != OutcomeAcquired || r.Sends != 1 || r.Resent {
		t.Fatalf("redirected reserve: %+v %v; want 1 send, not resent", r, err)
	}
	if fc.redirects() == 0 {
		t.Fatal("no redirect happened")
	}
	fc.move(0, 2, false)
	results, errs, err := c.Batch(ctx, []Op{ReserveOp("ns", fc.keyOn(0, 1))})
	if err != nil || errs[0] != nil || results[0].Sends != 1 || results[0].Resent {
		t.Fatalf("redirected batch op: %+v %v %v", results[0], errs[0], err)
	}
}

// TestBatchUnsentOperationCountsNoSend: an operation that got no answer
// reports the sends that may have been applied, none for one never sent.
func TestBatchUnsentOperationCountsNoSend(t *testing.T) {
	c, err := Dial(context.Background(), closedAddr(t), fastRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	results, errs, err := c.Batch(testCtx(t), []Op{ReserveOp("ns", "k")})
	if err == nil || !strings.Contains(errs[0].Error(), "not sent") || results[0].Sends != 0 {
		t.Fatalf("batch to a closed port: %+v %v %v", results[0], errs[0], err)
	}
	r, err := c.Reserve(testCtx(t), "ns", "k")
	if err == nil || r.Sends != 0 || r.Resent {
		t.Fatalf("reserve to a closed port: %+v %v", r, err)
	}
}
