package client

import (
	"testing"

	"github.com/l4xg/grid/client/internal/wiretap"
)

// intercept runs after around every unary RPC and every answer frame of a
// stream (wiretap.Intercept).
func intercept(after wiretap.After) Option {
	return WithDialOptions(wiretap.Intercept(after)...)
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
