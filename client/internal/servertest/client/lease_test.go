package client_test

import (
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestReserveAndExtendCarryTheLocalSafeDeadline: against a real node whose
// clock is an hour ahead of the client's, the safe deadline of a Reserve,
// of an Extend and of a Reserve in a Batch is the client's clock before the
// send plus the lease minus the margin: by the client's clock, never the
// grid's deadline (which is an hour off) minus a margin.
func TestReserveAndExtendCarryTheLocalSafeDeadline(t *testing.T) {
	n := gridtest.Start(t, gridtest.Options{Clock: func() time.Time { return time.Now().Add(time.Hour) }})
	ctx := testCtx(t)
	modes(t, func(t *testing.T, batching bool) {
		c := dialNode(t, n, client.WithBatching(batching))
		key := "k-" + map[bool]string{true: "b", false: "u"}[batching]
		within := func(what string, r client.Result, before, after time.Time, lease, margin time.Duration) {
			t.Helper()
			lo, hi := before.Add(lease-margin), after.Add(lease-margin)
			if r.SafeUntil.Before(lo) || r.SafeUntil.After(hi) {
				t.Fatalf("%s: safe until %v, want in [%v, %v] (grid deadline %v)", what, r.SafeUntil, lo, hi, r.Deadline)
			}
		}
		before := time.Now()
		r, err := c.Reserve(ctx, "ns", key, client.WithLease(10*time.Second))
		after := time.Now()
		if err != nil || r.Outcome != client.OutcomeAcquired {
			t.Fatalf("reserve: %+v %v", r, err)
		}
		within("reserve", r, before, after, 10*time.Second, time.Second)
		if r.Deadline.Before(after.Add(30 * time.Minute)) {
			t.Fatalf("grid deadline %v: the node's clock is not ahead", r.Deadline)
		}

		before = time.Now()
		e, err := c.Extend(ctx, "ns", key, r.Token, 20*time.Second, client.WithLeaseMargin(3*time.Second))
		after = time.Now()
		if err != nil {
			t.Fatal(err)
		}
		within("extend", e, before, after, 20*time.Second, 3*time.Second)

		busy, err := c.Reserve(ctx, "ns", key)
		if err != nil || busy.Outcome != client.OutcomeBusy || !busy.SafeUntil.IsZero() {
			t.Fatalf("busy: %+v %v; want no safe deadline", busy, err)
		}
		done, err := c.Complete(ctx, "ns", key, r.Token)
		if err != nil || !done.SafeUntil.IsZero() {
			t.Fatalf("complete: %+v %v; want no safe deadline", done, err)
		}

		before = time.Now()
		res, errs, err := c.Batch(ctx, []client.Op{client.ReserveOp("ns", key+"-batch", client.WithLease(2*time.Second))})
		after = time.Now()
		if err != nil || errs[0] != nil {
			t.Fatal(err, errs)
		}
		within("batch reserve", res[0], before, after, 2*time.Second, 250*time.Millisecond)
	})
}
