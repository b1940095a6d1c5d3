package client

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/internal/testwait"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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

func TestOperationsRoundTrip(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		c, _ := dialFake(t, WithBatching(batching))
		ctx := testCtx(t)

		r, err := c.Reserve(ctx, "orders", "o-1", WithLease(time.Minute), WithFingerprint(42))
		if err != nil || r.Outcome != OutcomeAcquired || r.State != StateProcessing || r.Attempt != 1 || r.Token == 0 {
			t.Fatalf("reserve: %+v %v", r, err)
		}
		if !r.HasFingerprint || r.Fingerprint != 42 || r.Deadline.Before(r.Now.Add(59*time.Second)) {
			t.Fatalf("reserve fields: %+v", r)
		}
		busy, err := c.Reserve(ctx, "orders", "o-1")
		if err != nil || busy.Outcome != OutcomeBusy || busy.RetryAfter <= 0 {
			t.Fatalf("second reserve: %+v %v", busy, err)
		}
		var be *BusyError
		if err := busy.Err(); !errors.As(err, &be) || !errors.Is(err, ErrBusy) || be.RetryAfter != busy.RetryAfter {
			t.Fatalf("busy Err(): %v", err)
		}
		if _, err := c.Extend(ctx, "orders", "o-1", r.Token, time.Minute); err != nil {
			t.Fatalf("extend: %v", err)
		}
		done, err := c.Complete(ctx, "orders", "o-1", r.Token, WithResult([]byte("shipped")), WithRetention(time.Hour))
		if err != nil || done.Outcome != OutcomeOK || done.State != StateCompleted || done.CompletedAt.IsZero() {
			t.Fatalf("complete: %+v %v", done, err)
		}
		again, err := c.Complete(ctx, "orders", "o-1", r.Token)
		if err != nil || again.Outcome != OutcomeOK {
			t.Fatalf("complete repeated: %+v %v", again, err)
		}
		dup, err := c.Reserve(ctx, "orders", "o-1")
		if err != nil || dup.Outcome != OutcomeDuplicate || string(dup.Result) != "shipped" || dup.Err() != nil {
			t.Fatalf("duplicate: %+v %v", dup, err)
		}
		g, err := c.Get(ctx, "orders", "o-1", WithStaleOK())
		if err != nil || g.State != StateCompleted {
			t.Fatalf("get: %+v %v", g, err)
		}
		fg, err := c.Forget(ctx, "orders", "o-1")
		if err != nil || !fg.Existed {
			t.Fatalf("forget: %+v %v", fg, err)
		}
		g, err = c.Get(ctx, "orders", "o-1")
		if err != nil || g.State != StateAbsent {
			t.Fatalf("get after forget: %+v %v", g, err)
		}
	})
}

func TestLeaseLostIsAnErrorForTheHolder(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		c, _ := dialFake(t, WithBatching(batching))
		ctx := testCtx(t)
		r, err := c.Reserve(ctx, "ns", "k")
		if err != nil {
			t.Fatal(err)
		}
		stale := r.Token + 1
		for name, call := range map[string]func() (Result, error){
			"complete": func() (Result, error) { return c.Complete(ctx, "ns", "k", stale) },
			"fail":     func() (Result, error) { return c.Fail(ctx, "ns", "k", stale) },
			"release":  func() (Result, error) { return c.Release(ctx, "ns", "k", stale) },
			"extend":   func() (Result, error) { return c.Extend(ctx, "ns", "k", stale, time.Second) },
		} {
			res, err := call()
			if !errors.Is(err, ErrLeaseLost) || res.Outcome != OutcomeLeaseLost {
				t.Errorf("%s: %v %v, want LEASE_LOST and ErrLeaseLost", name, res.Outcome, err)
			}
		}
	})
}

func TestFailOptionsReachTheGrid(t *testing.T) {
	c, f := dialFake(t)
	ctx := testCtx(t)
	r, _ := c.Reserve(ctx, "ns", "a")
	fr, err := c.Fail(ctx, "ns", "a", r.Token, WithRetryAfter(1500*time.Millisecond))
	if err != nil || fr.State != StateFailed {
		t.Fatalf("fail: %+v %v", fr, err)
	}
	r, _ = c.Reserve(ctx, "ns", "b")
	fr, err = c.Fail(ctx, "ns", "b", r.Token, WithPoison(), WithRetention(time.Hour))
	if err != nil || fr.State != StatePoisoned {
		t.Fatalf("fail poison: %+v %v", fr, err)
	}
	var got []*gridpb.FailRequest
	for _, op := range f.received() {
		if fl := op.GetFail(); fl != nil {
			got = append(got, fl)
		}
	}
	if len(got) != 2 || got[0].GetRetryAfterMs() != 1500 || got[0].RetryAfterMs == nil || !got[1].GetPoison() || got[1].GetRetentionMs() != 3600000 {
		t.Fatalf("fail requests: %v", got)
	}
}

func TestRetriesOnUnavailable(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		c, f := dialFake(t, WithBatching(batching), fastRetry(5))
		var n atomic.Int32
		f.setHooks(fakeHooks{rpc: func(context.Context, string) error {
			if n.Add(1) <= 2 {
				return status.Error(codes.Unavailable, "shard 3: no leader")
			}
			return nil
		}})
		r, err := c.Reserve(testCtx(t), "ns", "k")
		if err != nil || r.Outcome != OutcomeAcquired {
			t.Fatalf("reserve: %v %v", r.Outcome, err)
		}
		if got := n.Load(); got != 3 {
			t.Fatalf("%d sends, want 3", got)
		}
	})
}

func TestRetriesOperationRefusedAsUnavailableInBatch(t *testing.T) {
	c, f := dialFake(t, fastRetry(5))
	var n atomic.Int32
	f.setHooks(fakeHooks{op: func(*gridpb.Op) error {
		if n.Add(1) == 1 {
			return status.Error(codes.Unavailable, "shard 3: no leader")
		}
		return nil
	}})
	r, err := c.Reserve(testCtx(t), "ns", "k")
	if err != nil || r.Outcome != OutcomeAcquired {
		t.Fatalf("reserve: %v %v", r.Outcome, err)
	}
	if got := f.rpcCount("Batch"); got != 2 {
		t.Fatalf("%d Batch RPCs, want 2", got)
	}
}

func TestNoRetryOnInvalidArgument(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		c, f := dialFake(t, WithBatching(batching), fastRetry(5))
		long := string(make([]byte, 2000))
		_, err := c.Reserve(testCtx(t), "ns", long)
		if !errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v, want ErrInvalidArgument", err)
		}
		if got := countKind(f.received(), "reserve"); got != 1 {
			t.Fatalf("%d sends, want 1", got)
		}
	})
}

func TestRetriesAreBounded(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		c, f := dialFake(t, WithBatching(batching), fastRetry(3))
		var n atomic.Int32
		f.setHooks(fakeHooks{rpc: func(context.Context, string) error {
			n.Add(1)
			return status.Error(codes.Unavailable, "node shutting down")
		}})
		_, err := c.Get(testCtx(t), "ns", "k")
		if !errors.Is(err, ErrUnavailable) || status.Code(err) != codes.Unavailable {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		if got := n.Load(); got != 3 {
			t.Fatalf("%d sends, want 3", got)
		}
	})
}

func TestRetryBackoffRespectsContext(t *testing.T) {
	c, f := dialFake(t, WithStreaming(false), WithRetryPolicy(RetryPolicy{Attempts: 10, BaseBackoff: time.Hour, MaxBackoff: time.Hour}))
	f.setHooks(fakeHooks{rpc: func(context.Context, string) error {
		return status.Error(codes.Unavailable, "no leader")
	}})
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "ns", "k")
		done <- err
	}()
	// The answer is in once the batch gave its slot back.
	testwait.For(t, 10*time.Second, "the first answer", func() bool { return f.rpcCount("Batch") == 1 && len(c.seed.b.c.(*unaryCarrier).slots) == 0 })
	cancel() // during the hour of backoff
	err := <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want both context.Canceled and the last ErrUnavailable", err)
	}
}

func TestUnreachableGridIsUnavailable(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		c, err := Dial(context.Background(), closedAddr(t), WithBatching(batching), fastRetry(2))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Reserve(testCtx(t), "ns", "k"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("reserve: %v, want ErrUnavailable", err)
		}
		if _, err := c.Status(testCtx(t)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("status: %v, want ErrUnavailable", err)
		}
	})
}

// TestRetriedReserveMayFindItsOwnLease: against a grid that ignores
// request ids, a Process whose granted Reserve lost its answer finds its
// own lease on the retry and reports BUSY after retry, without running the
// handler.
func TestRetriedReserveMayFindItsOwnLease(t *testing.T) {
	c, f := dialFake(t, fastRetry(3))
	f.ignoreRequestIDs()
	var lost atomic.Bool
	f.setHooks(fakeHooks{after: func(op *gridpb.Op, _ *gridpb.OpResult) error {
		if op.GetReserve() != nil && lost.CompareAndSwap(false, true) {
			return status.Error(codes.Unavailable, "connection reset") // granted, answer lost
		}
		return nil
	}})
	_, err := c.Process(testCtx(t), "ns", "k", func(context.Context, Lease) ([]byte, error) {
		t.Error("handler ran without a lease")
		return nil, nil
	})
	var be *BusyError
	if !errors.As(err, &be) || !be.AfterRetry || be.RetryAfter <= 0 {
		t.Fatalf("err = %#v, want a *BusyError with AfterRetry", err)
	}
}

func TestExplicitBatch(t *testing.T) {
	c, f := dialFake(t, WithMaxBatchSize(2))
	ctx := testCtx(t)
	r, err := c.Reserve(ctx, "ns", "held")
	if err != nil {
		t.Fatal(err)
	}
	ops := []Op{
		ReserveOp("ns", "a"),
		CompleteOp("ns", "held", r.Token, WithResult([]byte("x"))),
		ReserveOp("ns", "held"),
		ExtendOp("ns", "nobody", 7, time.Second),
		ReserveOp("ns", string(make([]byte, 2000))),
		GetOp("ns", "a"),
		ForgetOp("ns", "a"),
	}
	before := f.rpcCount("Batch")
	results, errs, err := c.Batch(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(ops) || len(errs) != len(ops) {
		t.Fatalf("%d results, %d errors for %d ops", len(results), len(errs), len(ops))
	}
	want := []Outcome{OutcomeAcquired, OutcomeOK, OutcomeDuplicate, OutcomeLeaseLost, OutcomeUnspecified, OutcomeOK, OutcomeOK}
	for i, o := range want {
		if results[i].Outcome != o {
			t.Errorf("op %d: outcome %v, want %v", i, results[i].Outcome, o)
		}
	}
	for i, e := range errs {
		switch i {
		case 3:
			if !errors.Is(e, ErrLeaseLost) {
				t.Errorf("op 3: %v, want ErrLeaseLost", e)
			}
		case 4:
			if !errors.Is(e, ErrInvalidArgument) {
				t.Errorf("op 4: %v, want ErrInvalidArgument", e)
			}
		default:
			if e != nil {
				t.Errorf("op %d: %v", i, e)
			}
		}
	}
	if !results[6].Existed {
		t.Error("forget: Existed false")
	}
	if got := f.rpcCount("Batch") - before; got != 4 {
		t.Fatalf("%d Batch RPCs, want 4 (chunks of 2)", got)
	}
}

func TestExplicitBatchRetriesOnlyUnavailableOperations(t *testing.T) {
	c, f := dialFake(t, fastRetry(3))
	var refused atomic.Bool
	f.setHooks(fakeHooks{op: func(op *gridpb.Op) error {
		if _, key := wiretap.OpKey(op); key == "b" && refused.CompareAndSwap(false, true) {
			return status.Error(codes.Unavailable, "shard 1: no leader")
		}
		return nil
	}})
	results, errs, err := c.Batch(testCtx(t), []Op{ReserveOp("ns", "a"), ReserveOp("ns", "b"), ReserveOp("ns", "c")})
	if err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		t.Fatalf("batch: %v %v", errs, err)
	}
	for i, r := range results {
		if r.Outcome != OutcomeAcquired {
			t.Errorf("op %d: %v", i, r.Outcome)
		}
	}
	if got := f.sizes(); !slices.Equal(got, []int{3, 1}) {
		t.Fatalf("batch sizes %v, want [3 1]", got)
	}
}

func TestExplicitBatchFailedRPC(t *testing.T) {
	c, f := dialFake(t, fastRetry(2), WithMaxBatchSize(1))
	f.setHooks(fakeHooks{rpc: func(context.Context, string) error {
		return status.Error(codes.Unavailable, "no leader")
	}})
	_, errs, err := c.Batch(testCtx(t), []Op{ReserveOp("ns", "a"), ReserveOp("ns", "b")})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(errs[0], ErrUnavailable) || !errors.Is(errs[1], ErrUnavailable) {
		t.Fatalf("errs = %v", errs)
	}
	if got := f.rpcCount("Batch"); got != 2 {
		t.Fatalf("%d RPCs, want 2 (the second chunk is not sent)", got)
	}
}

func TestExplicitBatchRefusesEmptyOp(t *testing.T) {
	c, f := dialFake(t)
	_, errs, err := c.Batch(testCtx(t), []Op{ReserveOp("ns", "a"), {}})
	if !errors.Is(err, ErrInvalidArgument) || !errors.Is(errs[0], ErrInvalidArgument) {
		t.Fatalf("err = %v, errs = %v", err, errs)
	}
	if f.rpcCount("Batch") != 0 {
		t.Fatal("sent")
	}
}

func TestStatus(t *testing.T) {
	c, _ := dialFake(t)
	s, err := c.Status(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.NodeID != "fake" || s.Slots != 4096 || s.ShardCount != 1 || s.MapEpoch != 3 || s.ControlState != "Follower" || len(s.Shards) != 1 || s.Shards[0].RaftState != "Leader" || s.Shards[0].AppliedIndex != 7 || s.Shards[0].Stamp.IsZero() {
		t.Fatalf("status: %+v", s)
	}
}

func TestChunkEnd(t *testing.T) {
	big := make([]byte, 60<<10)
	var ops []Op
	for range 200 {
		ops = append(ops, CompleteOp("ns", "k", 1, WithResult(big)))
	}
	end := chunkEnd(ops, 0, MaxBatchSize, maxBatchBytes)
	if end < 50 || end > 70 {
		t.Fatalf("a 4 MiB chunk of 60 KiB ops ends at %d", end)
	}
	if got := chunkEnd(ops, 0, 3, maxBatchBytes); got != 3 {
		t.Fatalf("chunkEnd by count = %d", got)
	}
	huge := []Op{CompleteOp("ns", "k", 1, WithResult(make([]byte, 5<<20)))}
	if got := chunkEnd(huge, 0, 10, maxBatchBytes); got != 1 {
		t.Fatalf("an oversized op must still form a chunk, got %d", got)
	}
}

// closedAddr returns a loopback address that was just listening and is now
// closed: connections to it are refused.
func closedAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
