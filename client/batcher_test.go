package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/internal/testwait"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gate blocks the first Batch RPC until opened (or until its context ends),
// so that the calls made meanwhile queue up behind it.
type gate struct {
	once    sync.Once
	entered chan struct{}
	open    chan struct{}
	first   sync.Once
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) hook(ctx context.Context, method string) error {
	if method != "Batch" {
		return nil
	}
	isFirst := false
	g.first.Do(func() { isFirst = true })
	if !isFirst {
		return nil
	}
	close(g.entered)
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// queued is the number of calls waiting in the batcher.
func (b *batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// waitQueued waits until n calls wait in the batcher.
func waitQueued(t *testing.T, c *Client, n int) {
	t.Helper()
	testwait.For(t, 10*time.Second, fmt.Sprintf("%d queued calls", n), func() bool { return c.seed.b.queued() == n })
}

func TestBatchingCoalescesConcurrentCalls(t *testing.T) {
	c, f := dialFake(t, WithStreaming(false), WithMaxInFlight(1))
	g := newGate()
	defer g.release()
	f.setHooks(fakeHooks{rpc: g.hook})
	ctx := testCtx(t)

	const n = 100
	var wg sync.WaitGroup
	errs := make([]error, n)
	outcomes := make([]Outcome, n)
	call := func(i int) {
		defer wg.Done()
		r, err := c.Reserve(ctx, "ns", fmt.Sprintf("k%d", i))
		outcomes[i], errs[i] = r.Outcome, err
	}
	wg.Add(1)
	go call(0)
	<-g.entered // the lone first call left at once, alone
	wg.Add(n - 1)
	for i := 1; i < n; i++ {
		go call(i)
	}
	waitQueued(t, c, n-1)
	g.release()
	wg.Wait()

	for i := range n {
		if errs[i] != nil || outcomes[i] != OutcomeAcquired {
			t.Fatalf("call %d: %v %v", i, outcomes[i], errs[i])
		}
	}
	if got := f.sizes(); !slices.Equal(got, []int{1, n - 1}) {
		t.Fatalf("batch sizes %v, want [1 %d]", got, n-1)
	}
}

func TestBatchingCapsBatchSize(t *testing.T) {
	c, f := dialFake(t, WithStreaming(false), WithMaxInFlight(1), WithMaxBatchSize(10))
	g := newGate()
	defer g.release()
	f.setHooks(fakeHooks{rpc: g.hook})
	ctx := testCtx(t)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = c.Get(ctx, "ns", "first")
	}()
	<-g.entered
	for i := range 25 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Get(ctx, "ns", fmt.Sprint(i)); err != nil {
				t.Error(err)
			}
		}()
	}
	waitQueued(t, c, 25)
	g.release()
	wg.Wait()
	if got := f.sizes(); !slices.Equal(got, []int{1, 10, 10, 5}) {
		t.Fatalf("batch sizes %v, want [1 10 10 5]", got)
	}
}

func TestBatchPerOperationErrors(t *testing.T) {
	c, f := dialFake(t, WithStreaming(false), WithMaxInFlight(1))
	g := newGate()
	defer g.release()
	const limitMsg = "keyspace: key too long: 2000 bytes, limit 1024"
	f.setHooks(fakeHooks{
		rpc: g.hook,
		op: func(op *gridpb.Op) error {
			if _, key := wiretap.OpKey(op); key == "bad" {
				return status.Error(codes.InvalidArgument, limitMsg)
			}
			return nil
		},
	})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = c.Get(ctx, "ns", "first")
	}()
	<-g.entered
	var goodErr, badErr error
	var good Result
	wg.Add(2)
	go func() {
		defer wg.Done()
		good, goodErr = c.Reserve(ctx, "ns", "good")
	}()
	go func() {
		defer wg.Done()
		_, badErr = c.Reserve(ctx, "ns", "bad")
	}()
	waitQueued(t, c, 2)
	g.release()
	wg.Wait()

	if goodErr != nil || good.Outcome != OutcomeAcquired {
		t.Fatalf("good op: %v %v", good.Outcome, goodErr)
	}
	if !errors.Is(badErr, ErrInvalidArgument) || status.Code(badErr) != codes.InvalidArgument {
		t.Fatalf("bad op: %v", badErr)
	}
	if got := badErr.Error(); got != "client: invalid argument: "+limitMsg {
		t.Fatalf("message %q does not keep the grid's", got)
	}
	if got := f.sizes(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("batch sizes %v, want [1 2]", got)
	}
}

func TestCancelledCallerReturnsWhileBatchInFlight(t *testing.T) {
	c, f := dialFake(t)
	g := newGate()
	defer g.release()
	f.setHooks(fakeHooks{rpc: g.hook})
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := c.Reserve(ctx, "ns", "k")
		done <- err
	}()
	<-g.entered
	cancel()
	err := <-done // returns although the RPC is still held at the gate
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestAbandonedBatchFreesItsSlot(t *testing.T) {
	c, f := dialFake(t, WithStreaming(false), WithMaxInFlight(1))
	g := newGate() // never released: only the batch's cancellation frees it
	f.setHooks(fakeHooks{rpc: g.hook})
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := c.Reserve(ctx, "ns", "abandoned")
		done <- err
	}()
	<-g.entered
	cancel()
	<-done
	// The window has one slot; this call can only go once the abandoned
	// batch was cancelled.
	if r, err := c.Reserve(testCtx(t), "ns", "next"); err != nil || r.Outcome != OutcomeAcquired {
		t.Fatalf("next call: %v %v", r.Outcome, err)
	}
}

func TestQueuedCancelledCallIsNotSent(t *testing.T) {
	c, f := dialFake(t, WithStreaming(false), WithMaxInFlight(1))
	g := newGate()
	defer g.release()
	f.setHooks(fakeHooks{rpc: g.hook})
	ctx := testCtx(t)
	first := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "ns", "first")
		first <- err
	}()
	<-g.entered
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := c.Reserve(cctx, "ns", "gone")
		gone <- err
	}()
	waitQueued(t, c, 1)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	g.release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "ns", "last"); err != nil {
		t.Fatal(err)
	}
	for _, op := range f.received() {
		if _, key := wiretap.OpKey(op); key == "gone" {
			t.Fatal("the cancelled call was sent")
		}
	}
}

func TestCloseFailsWaitingCalls(t *testing.T) {
	c, f := dialFake(t, WithStreaming(false), WithMaxInFlight(1))
	g := newGate()
	defer g.release()
	f.setHooks(fakeHooks{rpc: g.hook})
	ctx := testCtx(t)
	inflight := make(chan error, 1)
	queued := make(chan error, 1)
	go func() {
		_, err := c.Reserve(ctx, "ns", "inflight")
		inflight <- err
	}()
	<-g.entered
	go func() {
		_, err := c.Reserve(ctx, "ns", "queued")
		queued <- err
	}()
	waitQueued(t, c, 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"in flight": inflight, "queued": queued} {
		if err := <-ch; !errors.Is(err, ErrClosed) {
			t.Errorf("%s call: %v, want ErrClosed", name, err)
		}
	}
	if _, err := c.Reserve(ctx, "ns", "after"); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
