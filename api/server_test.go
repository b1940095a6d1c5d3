package api_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
)

func TestReserveCompleteDuplicate(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	res, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("orders"), Key: []byte("m-1"), LeaseMs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != gridpb.Outcome_ACQUIRED || res.Token == 0 || res.Attempt != 1 {
		t.Fatalf("reserve: %v", res)
	}
	done, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("orders"), Key: []byte("m-1"), Token: res.Token, Result: []byte("ok")})
	if err != nil || done.Outcome != gridpb.Outcome_OK || done.State != gridpb.State_COMPLETED {
		t.Fatalf("complete: %v %v", done, err)
	}
	dup, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("orders"), Key: []byte("m-1")})
	if err != nil || dup.Outcome != gridpb.Outcome_DUPLICATE || string(dup.Result) != "ok" || dup.CompletedAtUnixMs == 0 {
		t.Fatalf("duplicate: %v %v", dup, err)
	}
	got, err := c.Get(gridtest.Context(t), &gridpb.GetRequest{Namespace: []byte("orders"), Key: []byte("m-1"), ShowToken: true})
	if err != nil || got.State != gridpb.State_COMPLETED || got.Token != res.Token {
		t.Fatalf("get: %v %v", got, err)
	}
}

// TestLimits checks that every limit of docs/design.md section 7 is refused
// with the right code and a message naming it, and that the node keeps
// serving.
func TestLimits(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	big := make([]byte, 64<<10+1)
	cases := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"empty key", func() error {
			_, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: nil})
			return err
		}, codes.InvalidArgument, "empty key"},
		{"key over 1 KiB", func() error {
			_, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: make([]byte, 1025)})
			return err
		}, codes.InvalidArgument, "key too long: 1025 bytes, limit 1024"},
		{"bad namespace", func() error {
			_, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("Bad NS"), Key: []byte("k")})
			return err
		}, codes.InvalidArgument, "invalid namespace"},
		{"lease too short", func() error {
			_, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: []byte("k"), LeaseMs: 50})
			return err
		}, codes.InvalidArgument, "lease out of range: 50ms, limit 100ms..1h0m0s"},
		{"lease too long", func() error {
			_, err := c.Extend(gridtest.Context(t), &gridpb.ExtendRequest{Namespace: []byte("ns"), Key: []byte("k"), Token: 1, LeaseMs: 2 * 3600 * 1000})
			return err
		}, codes.InvalidArgument, "lease out of range"},
		{"token 0", func() error {
			_, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("ns"), Key: []byte("k"), Token: 0})
			return err
		}, codes.InvalidArgument, "invalid token"},
		{"retention over 400 days", func() error {
			_, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("ns"), Key: []byte("k"), Token: 7, RetentionMs: 401 * 24 * 3600 * 1000})
			return err
		}, codes.InvalidArgument, "retention out of range"},
		{"result over 64 KiB", func() error {
			_, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("ns"), Key: []byte("k"), Token: 7, Result: big})
			return err
		}, codes.ResourceExhausted, "result too large: 65537 bytes, limit 65536"},
		{"lease that overflows a duration", func() error {
			_, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: []byte("k"), LeaseMs: 1<<58 + 30000})
			return err
		}, codes.InvalidArgument, "lease out of range"},
		{"retention that overflows a duration", func() error {
			_, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("ns"), Key: []byte("k"), Token: 7, RetentionMs: -(1 << 58) + 1000})
			return err
		}, codes.InvalidArgument, "retention out of range"},
		{"negative retry_after", func() error {
			ms := int64(-5)
			_, err := c.Fail(gridtest.Context(t), &gridpb.FailRequest{Namespace: []byte("ns"), Key: []byte("k"), Token: 7, RetryAfterMs: &ms})
			return err
		}, codes.InvalidArgument, "retry_after out of range"},
		{"max attempts over cap", func() error {
			_, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: []byte("k"), MaxAttempts: 1000})
			return err
		}, codes.InvalidArgument, "max_attempts out of range"},
		{"batch over 1000", func() error {
			ops := make([]*gridpb.Op, 1001)
			for i := range ops {
				ops[i] = &gridpb.Op{Op: &gridpb.Op_Get{Get: &gridpb.GetRequest{Namespace: []byte("ns"), Key: []byte("k")}}}
			}
			_, err := c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: ops})
			return err
		}, codes.ResourceExhausted, "batch too large: 1001 operations, limit 1000"},
		{"empty batch", func() error {
			_, err := c.Batch(gridtest.Context(t), &gridpb.BatchRequest{})
			return err
		}, codes.InvalidArgument, "empty batch"},
		{"request over 4 MiB", func() error {
			ops := make([]*gridpb.Op, 70)
			for i := range ops {
				ops[i] = &gridpb.Op{Op: &gridpb.Op_Complete{Complete: &gridpb.CompleteRequest{Namespace: []byte("ns"), Key: []byte("k"), Token: 1, Result: big[:60<<10]}}}
			}
			_, err := c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: ops})
			return err
		}, codes.ResourceExhausted, "larger than max"},
	}
	for _, tc := range cases {
		err := tc.call()
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want %v containing %q", tc.name, err, tc.code, tc.msg)
		}
	}
	// Still serving.
	res, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: []byte("after")})
	if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("node stopped serving after bad input: %v %v", res, err)
	}
}

// TestBatchPerOperationErrors: a bad operation fails alone; the others run,
// and results come back in order.
func TestBatchPerOperationErrors(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	var ops []*gridpb.Op
	for i := 0; i < 50; i++ {
		key := []byte{byte('a' + i%26), byte('0' + i/26)}
		if i == 17 {
			key = nil
		}
		ops = append(ops, &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: &gridpb.ReserveRequest{Namespace: []byte("b"), Key: key}}})
	}
	ops = append(ops, &gridpb.Op{Op: &gridpb.Op_Get{Get: &gridpb.GetRequest{Namespace: []byte("b"), Key: []byte("a0"), ShowToken: true}}})
	resp, err := c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != len(ops) {
		t.Fatalf("%d results for %d ops", len(resp.Results), len(ops))
	}
	for i, r := range resp.Results[:50] {
		if i == 17 {
			if r.Error == nil || codes.Code(r.Error.Code) != codes.InvalidArgument {
				t.Errorf("op 17: want InvalidArgument, got %v", r)
			}
			continue
		}
		if r.Error != nil || r.Outcome != gridpb.Outcome_ACQUIRED {
			t.Errorf("op %d: %v", i, r)
		}
	}
	if last := resp.Results[50]; last.State != gridpb.State_PROCESSING || last.Token != resp.Results[0].Token {
		t.Errorf("get after reserve in the same batch: %v, want PROCESSING with token %d", last, resp.Results[0].Token)
	}
}

// TestGarbageOnPort: random bytes and a truncated protobuf do not crash the node.
func TestGarbageOnPort(t *testing.T) {
	n := gridtest.Start(t)
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		[]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x08\x00\x00\x00\x00\x00\xff\xff\xff\xff"),
		make([]byte, 70000),
	} {
		conn, err := net.Dial("tcp", n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(junk)
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, _ = conn.Read(make([]byte, 1024))
		conn.Close()
	}
	// A well-formed gRPC call whose message bytes are not a ReserveRequest.
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out gridpb.OpResult
	err = conn.Invoke(gridtest.Context(t), "/l4xg.grid.v1.Grid/Reserve", rawMessage{0xff, 0xff, 0xff, 0x0f}, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) == codes.OK {
		t.Errorf("garbage message accepted: %v", &out)
	}
	c := gridtest.Dial(t, n.Addr())
	res, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: []byte("still-up")})
	if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("node not serving after garbage: %v %v", res, err)
	}
}

// rawMessage is sent as is: bytes that are not a valid protobuf message.
type rawMessage []byte

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if r, ok := v.(rawMessage); ok {
		return r, nil
	}
	return proto.Marshal(v.(proto.Message))
}

func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }

func (rawCodec) Name() string { return "proto" }

// TestBatchOrder: operations on one shard apply in batch order, reads
// included: a Get before a Reserve of the same key sees it absent, a Get
// after sees it held.
func TestBatchOrder(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	get := &gridpb.Op{Op: &gridpb.Op_Get{Get: &gridpb.GetRequest{Namespace: []byte("o"), Key: []byte("k")}}}
	reserve := &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: &gridpb.ReserveRequest{Namespace: []byte("o"), Key: []byte("k")}}}
	resp, err := c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{get, reserve, get}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Results
	if r[0].State != gridpb.State_ABSENT || r[1].Outcome != gridpb.Outcome_ACQUIRED || r[2].State != gridpb.State_PROCESSING {
		t.Fatalf("batch [get, reserve, get] = %v", r)
	}
}
