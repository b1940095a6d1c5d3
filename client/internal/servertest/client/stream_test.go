package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/internal/gridtest"
)

// Against a real node the calls go on one stream, answered by id.
func TestIntegrationStream(t *testing.T) {
	n := gridtest.Start(t)
	var frames, unary atomic.Int64 // answer frames of a stream; unary RPCs carrying operations
	c := dialNode(t, n, intercept(func(_ context.Context, method string, req, _ any, err error) error {
		switch {
		case strings.HasSuffix(method, "/Stream"):
			frames.Add(1)
		case len(wiretap.OpsOf(req)) > 0:
			unary.Add(1)
		}
		return err
	}))
	ctx := testCtx(t)
	const callers = 200
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("s-", i)
			r, err := c.Reserve(ctx, "ns", key)
			if err == nil && r.Outcome != client.OutcomeAcquired {
				err = fmt.Errorf("%s: %v", key, r.Outcome)
			}
			if err == nil {
				_, err = c.Complete(ctx, "ns", key, r.Token)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if frames.Load() == 0 || unary.Load() != 0 {
		t.Fatalf("%d stream answer frames and %d operation RPCs: want the calls on the real node's stream, none falling back to Batch", frames.Load(), unary.Load())
	}
	if r, err := c.Reserve(ctx, "ns", "s-0"); !errors.Is(err, client.ErrBusy) && (err != nil || r.Outcome != client.OutcomeDuplicate) {
		t.Fatalf("reserve of a completed key: %+v, %v", r, err)
	}
}
