package api_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"pgregory.net/rapid"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestRandomRequests: any request, however malformed its fields, gets a
// result or an InvalidArgument/ResourceExhausted error, and the node keeps
// serving. Field values are drawn around every limit.
func TestRandomRequests(t *testing.T) {
	n := gridtest.Start(t)
	c := dial(t, n.Addr())
	rapid.Check(t, func(rt *rapid.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ns := rapid.SampledFrom([]string{"", "ns", "Bad", "a.b-c_d", "x/y", string(make([]byte, 65)), "0"}).Draw(rt, "ns")
		key := rapid.SliceOfN(rapid.Byte(), 0, 1100).Draw(rt, "key")
		entity := rapid.SliceOfN(rapid.Byte(), 0, 1030).Draw(rt, "entity")
		ms := rapid.SampledFrom([]int64{0, -1, 1, 99, 100, 3_600_000, 3_600_001, 400 * 86_400_000, 400*86_400_000 + 1, 1 << 62, -1 << 62}).Draw(rt, "ms")
		token := rapid.SampledFrom([]uint64{0, 1, 1 << 16, 1<<64 - 1}).Draw(rt, "token")
		result := make([]byte, rapid.SampledFrom([]int{0, 10, 64 << 10, 64<<10 + 1}).Draw(rt, "result"))
		attempts := rapid.SampledFrom([]uint32{0, 1, 100, 101, 1 << 31}).Draw(rt, "attempts")
		var err error
		switch rapid.IntRange(0, 7).Draw(rt, "op") {
		case 0:
			_, err = c.Reserve(ctx, &gridpb.ReserveRequest{Namespace: []byte(ns), Key: key, LeaseMs: ms, MaxAttempts: attempts, Entity: entity, Version: token, PoisonRetentionMs: ms})
		case 1:
			_, err = c.Complete(ctx, &gridpb.CompleteRequest{Namespace: []byte(ns), Key: key, Token: token, RetentionMs: ms, Result: result, Entity: entity})
		case 2:
			_, err = c.Fail(ctx, &gridpb.FailRequest{Namespace: []byte(ns), Key: key, Token: token, RetryAfterMs: &ms, RetentionMs: ms, Poison: ms > 0, Entity: entity})
		case 3:
			_, err = c.Release(ctx, &gridpb.ReleaseRequest{Namespace: []byte(ns), Key: key, Token: token, Entity: entity})
		case 4:
			_, err = c.Extend(ctx, &gridpb.ExtendRequest{Namespace: []byte(ns), Key: key, Token: token, LeaseMs: ms, Entity: entity})
		case 5:
			_, err = c.Get(ctx, &gridpb.GetRequest{Namespace: []byte(ns), Key: key, StaleOk: ms > 0, Entity: entity})
		case 6:
			_, err = c.Forget(ctx, &gridpb.ForgetRequest{Namespace: []byte(ns), Key: key, Entity: entity})
		case 7:
			ops := []*gridpb.Op{{}, {Op: &gridpb.Op_Get{Get: &gridpb.GetRequest{Namespace: []byte(ns), Key: key}}}}
			var resp *gridpb.BatchResponse
			resp, err = c.Batch(ctx, &gridpb.BatchRequest{Ops: ops})
			if err == nil && (len(resp.Results) != 2 || resp.Results[0].Error == nil) {
				rt.Fatalf("batch with an empty operation: %v", resp)
			}
		}
		if code := status.Code(err); code != codes.OK && code != codes.InvalidArgument && code != codes.ResourceExhausted {
			rt.Fatalf("unexpected error %v", err)
		}
	})
	res, err := c.Reserve(context.Background(), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: []byte("alive")})
	if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("node after random requests: %v %v", res, err)
	}
}
