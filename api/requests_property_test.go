package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"pgregory.net/rapid"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestRequestsProperty is a property test (rapid), run on one node: any
// request, however malformed its fields, gets a result or an
// InvalidArgument/ResourceExhausted error, never Internal or Unknown, with
// a short, valid UTF-8 message, in a Batch as alone; and the node keeps
// serving on the same connection. Field values are drawn around every
// limit, namespaces among them that are not UTF-8, hold control bytes or
// run to a megabyte.
func TestRequestsProperty(t *testing.T) {
	n := gridtest.Start(t)
	cc := dialCounting(t, n.Addr())
	c := cc.c
	namespaces := []string{"", "ns", "Bad", "a.b-c_d", "x/y", string(make([]byte, 65)), "0",
		"\xff\xfe", "ns\xc3", "a\x00b", "\x1b[31m", string(bytes.Repeat([]byte{0x01}, 1<<20))}
	answer := func(rt *rapid.T, what string, code codes.Code, msg string) {
		if code != codes.OK && code != codes.InvalidArgument && code != codes.ResourceExhausted {
			rt.Fatalf("%s: unexpected code %v: %.300q", what, code, msg)
		}
		if len(msg) > maxMessage || !utf8.ValidString(msg) {
			rt.Fatalf("%s: %v with a message of %d bytes: %.300q", what, code, len(msg), msg)
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ns := rapid.SampledFrom(namespaces).Draw(rt, "ns")
		key := rapid.SliceOfN(rapid.Byte(), 0, 1100).Draw(rt, "key")
		entity := rapid.SliceOfN(rapid.Byte(), 0, 1030).Draw(rt, "entity")
		ms := rapid.SampledFrom([]int64{0, -1, 1, 99, 100, 3_600_000, 3_600_001, 400 * 86_400_000, 400*86_400_000 + 1, 1 << 62, -1 << 62}).Draw(rt, "ms")
		token := rapid.SampledFrom([]uint64{0, 1, 1 << 16, 1<<64 - 1}).Draw(rt, "token")
		result := make([]byte, rapid.SampledFrom([]int{0, 10, 64 << 10, 64<<10 + 1}).Draw(rt, "result"))
		attempts := rapid.SampledFrom([]uint32{0, 1, 100, 101, 1 << 31}).Draw(rt, "attempts")
		var err error
		switch rapid.IntRange(0, 9).Draw(rt, "op") {
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
		case 8:
			var stream gridpb.Grid_AuditClient
			stream, err = c.Audit(ctx, &gridpb.AuditRequest{Namespace: []byte(ns), SinceUnixMs: ms, UntilUnixMs: -ms, Limit: attempts})
			for err == nil {
				_, err = stream.Recv()
			}
			if errors.Is(err, io.EOF) {
				err = nil
			}
		case 9:
			// One operation of every type, with the same fields.
			var ops []*gridpb.Op
			for _, op := range opsFor([]byte(ns), key) {
				ops = append(ops, op)
			}
			var resp *gridpb.BatchResponse
			if resp, err = c.Batch(ctx, &gridpb.BatchRequest{Ops: ops}); err == nil {
				for i, r := range resp.Results {
					if e := r.GetError(); e != nil {
						answer(rt, fmt.Sprintf("batch operation %d", i), codes.Code(e.Code), e.Message)
					}
				}
			}
		}
		st := status.Convert(err)
		answer(rt, "call", st.Code(), st.Message())
	})
	cc.alive(t, "random requests")
	res, err := c.Reserve(context.Background(), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: []byte("alive")})
	if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("node after random requests: %v %v", res, err)
	}
}
