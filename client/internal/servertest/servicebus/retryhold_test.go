package servicebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	"github.com/l4xg/grid/client/servicebus"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
)

// TestRetryHold: a message failing on every run is run again in place
// until WithRetryHold has passed, then abandoned (one delivery) and run
// again on a later one; WithRetryHold(0) abandons it after every run (and
// every BUSY).
func TestRetryHold(t *testing.T) {
	for _, c := range []struct {
		name    string
		hold    time.Duration
		inPlace func(runs int) bool // the runs on the first delivery
	}{
		{"300ms", 300 * time.Millisecond, func(n int) bool { return n >= 2 }},
		{"0", 0, func(n int) bool { return n == 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			grid, _ := adaptertest.Grid(t)
			q := newFakeQueue(2*time.Second, 100)
			rs := &runs{fail: func(string, int) (time.Duration, bool) { return 100 * time.Millisecond, true }}
			reg := prometheus.NewRegistry()
			q.send(azservicebus.ReceivedMessage{MessageID: "m", Body: []byte("m")})
			adaptertest.Start(t, func(ctx context.Context) error {
				return servicebus.Consume(ctx, q, grid, "sb", rs.handler, servicebus.WithRetryHold(c.hold), servicebus.WithRegisterer(reg))
			})
			// Abandoned, the message is delivered again at once: the grid
			// answers BUSY until the retry-after, and with a hold of 0 that
			// abandons it again, until MaxDeliveryCount (100) dead-letters it.
			testwait.For(t, 10*time.Second, "a run on a later delivery, or a dead letter", func() bool {
				for _, r := range rs.snapshot() {
					if r.delivery > 1 {
						return true
					}
				}
				_, _, dead := q.state()
				return dead > 0
			}, rs.String)
			first := 0
			for _, r := range rs.snapshot() {
				if r.delivery == 1 {
					first++
				}
			}
			if !c.inPlace(first) {
				t.Fatalf("%d runs on the first delivery: %v", first, rs)
			}
			if n := adaptertest.Counted(t, reg, "servicebus", adapter.Failed, adapter.Requeue) +
				adaptertest.Counted(t, reg, "servicebus", adapter.Busy, adapter.Requeue); n < 1 {
				t.Fatalf("abandoned %v times, want at least 1", n)
			}
		})
	}
}
