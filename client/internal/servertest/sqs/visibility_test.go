package sqs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	"github.com/l4xg/grid/client/sqs"
	"github.com/l4xg/grid/internal/testwait"
)

// TestFinishedMessageStaysHidden: a receive's messages are deleted
// together once all have run, so a message whose handler finished early
// must stay invisible while the slowest one runs: here for three
// visibility timeouts. (Before, its visibility was extended only while its
// own handler ran: it came back, was received a second time and answered
// DUPLICATE.)
func TestFinishedMessageStaysHidden(t *testing.T) {
	e := setup(t, time.Second)
	grid, _ := adaptertest.Grid(t)
	e.send(t, "in", "fast", "idempotency-key", "fast")
	e.send(t, "in", "slow", "idempotency-key", "slow")
	// Both in one receive: the consumer starts once both are queued.
	fastDone := make(chan time.Time, 1)
	release := make(chan struct{})
	e.consume(t, grid, "in", func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
		if l.Key == "fast" {
			fastDone <- time.Now()
			return nil, nil
		}
		<-release
		return nil, nil
	}, sqs.WithVisibility(time.Second), sqs.WithRedrivePolicy())
	var done time.Time
	select {
	case done = <-fastDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the fast message was not handled")
	}
	// Another consumer of the queue receives what becomes visible. Three
	// visibility timeouts after the fast handler ended, while the slow one
	// still runs, the fast message has been received only once.
	e.consume(t, grid, "in", func(context.Context, types.Message, client.Lease) ([]byte, error) { return nil, nil },
		sqs.WithVisibility(time.Second), sqs.WithRedrivePolicy())
	testwait.For(t, 20*time.Second, "three visibility timeouts to pass", func() bool {
		for _, m := range e.fake.messages("in") {
			if m.Body == "fast" && m.receives > 1 {
				t.Fatalf("the fast message was received %d times while the slow one of its receive ran", m.receives)
			}
		}
		return time.Since(done) > 3*time.Second
	})
	close(release)
	testwait.For(t, 20*time.Second, "both messages deleted", func() bool { return e.fake.depth("in") == 0 })
}

// TestConsumeRequiresADeadLetterTarget: without WithDeadLetterQueue or
// WithRedrivePolicy, Consume does not start: it would have deleted
// poisoned, mismatched and keyless messages, losing them.
func TestConsumeRequiresADeadLetterTarget(t *testing.T) {
	e := setup(t, time.Second)
	grid, _ := adaptertest.Grid(t)
	err := sqs.Consume(context.Background(), e.api, e.fake.url("in"), grid, "test",
		func(context.Context, types.Message, client.Lease) ([]byte, error) { return nil, nil })
	if err == nil || !strings.Contains(err.Error(), "no dead-letter target") {
		t.Fatalf("Consume without a dead-letter target: %v, want it refused", err)
	}
}
