package client_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestIntegrationOmittedResults: a Batch of Reserves of a key completed
// with a 64 KiB result gets the result back in its first answers only, in
// order, and the others marked ResultOmitted; single calls, which
// automatic batching sends together (one RPC in flight here, so they
// queue up behind it), and Process still hand every caller the stored
// result.
func TestIntegrationOmittedResults(t *testing.T) {
	n := gridtest.Start(t)
	c := dialNode(t, n, client.WithStreaming(false), client.WithMaxInFlight(1))
	ctx := testCtx(t)
	stored := bytes.Repeat([]byte("r"), 64<<10)
	r, err := c.Reserve(ctx, "dup", "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, "dup", "k", r.Token, client.WithResult(stored)); err != nil {
		t.Fatal(err)
	}

	ops := make([]client.Op, 200)
	for i := range ops {
		ops[i] = client.ReserveOp("dup", "k")
	}
	results, errs, err := c.Batch(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for i, r := range results {
		switch {
		case errs[i] != nil || r.Outcome != client.OutcomeDuplicate:
			t.Fatalf("batch %d: %v %v, want DUPLICATE", i, r.Outcome, errs[i])
		case !r.ResultOmitted && bytes.Equal(r.Result, stored) && kept == i:
			kept++
		case !r.ResultOmitted || len(r.Result) != 0:
			t.Fatalf("batch %d: %d result bytes, omitted %v, after %d kept", i, len(r.Result), r.ResultOmitted, kept)
		}
	}
	if kept == 0 || kept == len(results) {
		t.Fatalf("%d of %d batch answers carry the result, want some but not all", kept, len(results))
	}
	t.Logf("Batch: %d of %d answers carry the result", kept, len(results))

	before := c.Stats().Batches
	const callers = 200
	var wg sync.WaitGroup
	errc := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Reserve(ctx, "dup", "k")
			if err == nil && (r.Outcome != client.OutcomeDuplicate || r.ResultOmitted || !bytes.Equal(r.Result, stored)) {
				t.Errorf("single reserve: %v with %d result bytes, omitted %v", r.Outcome, len(r.Result), r.ResultOmitted)
			}
			errc <- err
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("%d single calls in %d batches", callers, c.Stats().Batches-before)
	p, err := c.Process(ctx, "dup", "k", func(context.Context, client.Lease) ([]byte, error) {
		t.Error("handler ran for a completed key")
		return nil, nil
	})
	if err != nil || !p.Duplicate || !bytes.Equal(p.Result, stored) {
		t.Fatalf("process: duplicate %v with %d result bytes, %v", p.Duplicate, len(p.Result), err)
	}
}
