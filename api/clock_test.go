package api_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testclock"
)

// TestClockFarBehindGrantsNoLease: a node whose clock is set back an hour,
// behind the stamps its shards hold, refuses Reserve and Extend with
// UNAVAILABLE and a message naming the rule and the lag (the client maps
// it to ErrUnavailable: retryable), still completes, counts the refusals
// and the shard behind its stamps in /metrics, and shows the stamp ahead
// of its clock in Status; clock_ok, which is about the node's peers (it
// has none), and /readyz stay up (api/clock.go says why).
func TestClockFarBehindGrantsNoLease(t *testing.T) {
	clock := testclock.At(time.Now())
	n := gridtest.Start(t, gridtest.Options{Clock: clock.Now, HTTP: true})
	c := gridtest.Dial(t, n.Addr())
	st, err := c.Status(gridtest.Context(t), &gridpb.StatusRequest{})
	if err != nil || !st.ClockOk || st.MaxClockOffsetMs != 250 || st.ClockOffsetMs != 0 {
		t.Fatalf("status of a node with a good clock: %v %v; want clock_ok, bound 250 ms, offset 0", st, err)
	}
	ns, key := []byte("clock"), []byte("k")
	held, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: ns, Key: key, LeaseMs: 10_000})
	if err != nil || held.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("reserve: %v %v", held, err)
	}
	clock.Add(-time.Hour)
	refused := func(what string, err error) {
		t.Helper()
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.Unavailable || !strings.Contains(msg, "clock outside the maximum clock offset") ||
			!strings.Contains(msg, "1h0m0s behind the shard's latest stamp") || !strings.Contains(msg, "250ms") {
			t.Fatalf("%s on a node an hour behind: %v; want UNAVAILABLE naming the rule, the lag and the bound", what, err)
		}
	}
	_, err = c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: ns, Key: []byte("other"), LeaseMs: 10_000})
	refused("reserve", err)
	_, err = c.Extend(gridtest.Context(t), &gridpb.ExtendRequest{Namespace: ns, Key: key, Token: held.Token, LeaseMs: 10_000})
	refused("extend", err)

	cl, err := client.Dial(gridtest.Context(t), n.Addr(), client.WithRetryPolicy(client.RetryPolicy{Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Reserve(gridtest.Context(t), "clock", "other"); !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "1h0m0s behind") {
		t.Fatalf("client reserve: %v; want ErrUnavailable with the grid's reason", err)
	}

	done, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: ns, Key: key, Token: held.Token})
	if err != nil || done.Outcome != gridpb.Outcome_OK || done.NowUnixMs != held.NowUnixMs {
		t.Fatalf("complete on a node an hour behind: %v %v; want OK at the previous stamp %d", done, err, held.NowUnixMs)
	}
	st, err = c.Status(gridtest.Context(t), &gridpb.StatusRequest{})
	if err != nil || !st.ClockOk {
		t.Fatalf("status of a node an hour behind its stamps: %v %v; want clock_ok (no peer says otherwise)", st, err)
	}
	ahead := 0
	for _, sh := range st.Shards {
		if sh.StampUnixMs-st.NowUnixMs >= time.Hour.Milliseconds() {
			ahead++
		}
	}
	if ahead != 1 {
		t.Errorf("status shows %d shards with stamps an hour ahead of the node's clock, want 1: %v", ahead, st)
	}
	base := "http://" + n.HTTPAddr()
	_, metrics := gridtest.HTTPGet(t, base+"/metrics")
	for _, want := range []string{
		"l4xg_grid_clock_outside_bound 0",
		"l4xg_grid_clock_shards_behind_stamps 1",
		"l4xg_grid_clock_max_offset_seconds 0.25",
		`l4xg_grid_clock_lease_refusals_total{rule="behind_stamps"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _ := gridtest.HTTPGet(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz of a node outside the clock bound: %d, want 200 (readiness means caught up)", code)
	}

	clock.Add(time.Hour)
	again, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: ns, Key: []byte("other"), LeaseMs: 10_000})
	if err != nil || again.Outcome != gridpb.Outcome_ACQUIRED || again.NowUnixMs != clock.Now().UnixMilli() {
		t.Fatalf("reserve with the clock set right: %v %v; want ACQUIRED at the node's clock", again, err)
	}
}
