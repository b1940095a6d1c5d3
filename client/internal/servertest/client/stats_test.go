package client_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
)

// Stats counts every call that automatic batching answered, with its time
// queued and its time from the batch's send to the answer; unary calls are
// not counted.
func TestStatsCountBatchedCalls(t *testing.T) {
	n := gridtest.Start(t)
	ctx := testCtx(t)
	c := dialNode(t, n)
	const calls = 20
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Reserve(ctx, "ns", fmt.Sprint("k-", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	st := c.Stats()
	if st.Calls != calls || st.Batches == 0 || st.Batches > calls || st.Answer <= 0 || st.QueueWait < 0 {
		t.Fatalf("stats after %d batched reserves: %+v", calls, st)
	}

	u := dialNode(t, n, client.WithBatching(false))
	if _, err := u.Reserve(ctx, "ns", "unary"); err != nil {
		t.Fatal(err)
	}
	if st := u.Stats(); st.Calls != 0 || st.Batches != 0 {
		t.Fatalf("stats of a client without batching: %+v, want none", st)
	}
}
