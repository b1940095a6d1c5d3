package adapter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
)

// Every way Process can end maps to one outcome and action, and a retry
// carries the delay the grid gave.
func TestJudge(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		ctx  context.Context
		out  client.Processed
		err  error
		want Verdict
	}{
		{"completed", live, client.Processed{}, nil, Verdict{Outcome: Completed, Action: Ack}},
		{"duplicate", live, client.Processed{Duplicate: true}, nil, Verdict{Outcome: Duplicate, Action: Ack}},
		{"stale", live, client.Processed{}, client.ErrStale, Verdict{Outcome: Stale, Action: Ack}},
		{"poisoned", live, client.Processed{}, fmt.Errorf("x: %w", client.ErrPoisoned), Verdict{Outcome: Poisoned, Action: DeadLetter}},
		{"mismatch", live, client.Processed{}, client.ErrMismatch, Verdict{Outcome: Mismatch, Action: DeadLetter}},
		{"busy", live, client.Processed{}, &client.BusyError{RetryAfter: 3 * time.Second}, Verdict{Outcome: Busy, Action: Retry, Delay: 3 * time.Second}},
		{"busy for long", live, client.Processed{}, &client.BusyError{RetryAfter: time.Hour}, Verdict{Outcome: Busy, Action: Retry, Delay: 10 * time.Second}},
		{"busy while stopping", ended, client.Processed{}, &client.BusyError{RetryAfter: time.Second}, Verdict{Outcome: Busy, Action: Retry, Delay: time.Second}},
		{"released", ended, client.Processed{}, boom, Verdict{Outcome: Released, Action: Requeue}},
		{"failed", live, client.Processed{RetryAfter: 2 * time.Second}, boom, Verdict{Outcome: Failed, Action: Retry, Delay: 2 * time.Second}},
		{"grid unreachable", live, client.Processed{}, boom, Verdict{Outcome: Error, Action: Retry, Delay: time.Minute}},
		{"lease lost", live, client.Processed{}, client.ErrLeaseLost, Verdict{Outcome: Error, Action: Retry, Delay: time.Minute}},
	} {
		got := Judge(c.ctx, c.out, c.err, Delays{Error: time.Minute, Busy: 10 * time.Second})
		got.Cause = nil
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
