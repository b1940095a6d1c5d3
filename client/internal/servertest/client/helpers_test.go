package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/internal/testwait"
)

// testCtx is a context that ends with the test, bounded so a hang fails.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fastResend resends after a few milliseconds, as the default policy does
// after 25 ms.
var fastResend = client.WithRetryPolicy(client.RetryPolicy{Attempts: 5, BaseBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond})

// intercept runs after around every unary RPC and every answer frame of a
// stream (wiretap.Intercept).
func intercept(after wiretap.After) client.Option {
	return client.WithDialOptions(wiretap.Intercept(after)...)
}

// dropAnswer is d's client option.
func dropAnswer(d *wiretap.AnswerDropper) client.Option {
	return client.WithDialOptions(d.DialOptions()...)
}

// warm connects c to its node before a test with a short lease: a lease's
// safe window runs from before the Reserve's first send, and setting up the
// connection (over 100 ms under -race on a loaded machine) would come off
// it, leaving a 300 ms lease's first extension (150 ms of it kept as
// margin) too little time, or its Reserve answered too late to run.
func warm(t *testing.T, c *client.Client) {
	t.Helper()
	if _, err := c.Status(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// untilHeld waits, without failing the test (it may run outside the test's
// goroutine), until cond says a second consumer holds the key.
func untilHeld(cond func() bool) error {
	if !testwait.Holds(10*time.Second, cond) {
		return errors.New("timed out waiting for a second consumer holding the key")
	}
	return nil
}

// nil2 is a handler that must not run.
func nil2(context.Context, client.Lease) ([]byte, error) {
	return nil, errors.New("handler ran for a duplicate")
}

// modes runs a test with automatic batching on and off.
func modes(t *testing.T, test func(t *testing.T, batching bool)) {
	for _, batching := range []bool{true, false} {
		name := "unary"
		if batching {
			name = "batched"
		}
		t.Run(name, func(t *testing.T) { test(t, batching) })
	}
}
