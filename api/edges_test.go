package api_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/gridtest"
)

// Answers at the edges: hostile bytes, inputs as large as a request may
// be, a leadership transfer to a non-voter, a batch that asks for one
// stored result a thousand times. Every answer must
// carry the right code and a short message, and leave the caller's
// connection up: the tests count the client connection's dials, and a
// connection torn down by an answer is dialled again by the next call.

// maxMessage bounds every error message of these tests: the rule, a number
// or two and at most keyspace.MaxQuoted bytes of each input, quoted.
const maxMessage = 512

// countingConn is one client connection to a node that counts its dials.
type countingConn struct {
	conn  *grpc.ClientConn
	c     gridpb.GridClient
	dials atomic.Int32
}

// dialCounting connects to addr with gRPC's default limits, as any client
// of the protocol would.
func dialCounting(t *testing.T, addr string) *countingConn {
	t.Helper()
	cc := &countingConn{}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			cc.dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cc.conn, cc.c = conn, gridpb.NewGridClient(conn)
	return cc
}

// alive checks that a normal call after what succeeds on the same
// connection, never dialled again since the first.
func (cc *countingConn) alive(t *testing.T, what string) {
	t.Helper()
	if _, err := cc.c.Get(gridtest.Context(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: []byte("alive")}); err != nil {
		t.Fatalf("after %s: a normal call fails: %v", what, err)
	}
	if n := cc.dials.Load(); n != 1 {
		t.Fatalf("after %s: the client dialled %d times: an answer tore its connection down", what, n)
	}
}

// refused checks that err carries code want and a short, valid UTF-8
// message containing rule.
func refused(t *testing.T, what string, err error, want codes.Code, rule string) {
	t.Helper()
	st := status.Convert(err)
	checkMessage(t, what, st.Code(), st.Message(), want, rule)
}

func checkMessage(t *testing.T, what string, code codes.Code, msg string, want codes.Code, rule string) {
	t.Helper()
	if code != want || !strings.Contains(msg, rule) || len(msg) > maxMessage || !utf8.ValidString(msg) {
		t.Errorf("%s: %v, message of %d bytes %.300q; want %v naming %q in at most %d bytes",
			what, code, len(msg), msg, want, rule, maxMessage)
	}
}

// opsFor is one operation of each type on namespace ns and key key.
func opsFor(ns, key []byte) map[string]*gridpb.Op {
	return map[string]*gridpb.Op{
		"reserve":  {Op: &gridpb.Op_Reserve{Reserve: &gridpb.ReserveRequest{Namespace: ns, Key: key}}},
		"complete": {Op: &gridpb.Op_Complete{Complete: &gridpb.CompleteRequest{Namespace: ns, Key: key, Token: 1}}},
		"fail":     {Op: &gridpb.Op_Fail{Fail: &gridpb.FailRequest{Namespace: ns, Key: key, Token: 1}}},
		"release":  {Op: &gridpb.Op_Release{Release: &gridpb.ReleaseRequest{Namespace: ns, Key: key, Token: 1}}},
		"extend":   {Op: &gridpb.Op_Extend{Extend: &gridpb.ExtendRequest{Namespace: ns, Key: key, Token: 1}}},
		"get":      {Op: &gridpb.Op_Get{Get: &gridpb.GetRequest{Namespace: ns, Key: key}}},
		"forget":   {Op: &gridpb.Op_Forget{Forget: &gridpb.ForgetRequest{Namespace: ns, Key: key}}},
	}
}

// fourMiB is the value of control bytes (a namespace, a node id) with
// which the request size(v) measures is exactly digest.MaxRequestBytes,
// the largest a node takes: its error, quoting v with %q, would be some
// 16.8 MB, past a gRPC client's 16 MiB header limit.
func fourMiB(t *testing.T, size func(v []byte) int) []byte {
	t.Helper()
	v := bytes.Repeat([]byte{0x01}, digest.MaxRequestBytes-256)
	v = bytes.Repeat([]byte{0x01}, len(v)+digest.MaxRequestBytes-size(v))
	if n := size(v); n != digest.MaxRequestBytes {
		t.Fatalf("fourMiB: a request of %d bytes", n)
	}
	return v
}

// request is the request an operation carries, as its own RPC sends it.
func request(op *gridpb.Op) proto.Message {
	m := op.ProtoReflect()
	return m.Get(m.WhichOneof(m.Descriptor().Oneofs().ByName("op"))).Message().Interface()
}

// unary sends op as its own RPC.
func unary(ctx context.Context, c gridpb.GridClient, op *gridpb.Op) (*gridpb.OpResult, error) {
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		return c.Reserve(ctx, o.Reserve)
	case *gridpb.Op_Complete:
		return c.Complete(ctx, o.Complete)
	case *gridpb.Op_Fail:
		return c.Fail(ctx, o.Fail)
	case *gridpb.Op_Release:
		return c.Release(ctx, o.Release)
	case *gridpb.Op_Extend:
		return c.Extend(ctx, o.Extend)
	case *gridpb.Op_Get:
		return c.Get(ctx, o.Get)
	case *gridpb.Op_Forget:
		return c.Forget(ctx, o.Forget)
	}
	panic("unary: empty operation")
}

// TestBadNamespacesAnswerInvalidArgument: a namespace that is not valid
// UTF-8, holds control bytes, or is nearly 4 MiB of them is refused by
// every request type, alone and inside a Batch, and by Audit, with
// INVALID_ARGUMENT naming the rule in a short message; the connection
// stays up.
func TestBadNamespacesAnswerInvalidArgument(t *testing.T) {
	n := gridtest.Start(t)
	cc := dialCounting(t, n.Addr())
	cc.alive(t, "start")
	const rule = "[a-z0-9][a-z0-9._-]{0,63}"
	const huge = "4 MiB request of control bytes" // the namespace fills the request
	for _, name := range []string{"not UTF-8", "truncated UTF-8", "control bytes", huge} {
		ns := map[string][]byte{"not UTF-8": {0xff, 0xfe, 'a'}, "truncated UTF-8": []byte("ns\xc3"), "control bytes": {'a', 0x00, 0x01, '\n'}}[name]
		for op := range opsFor(nil, nil) {
			opOf := func(ns []byte) *gridpb.Op { return opsFor(ns, []byte("k"))[op] }
			if name == huge {
				ns = fourMiB(t, func(v []byte) int { return proto.Size(request(opOf(v))) })
			}
			_, err := unary(gridtest.Context(t), cc.c, opOf(ns))
			refused(t, name+" "+op, err, codes.InvalidArgument, rule)
			cc.alive(t, name+" "+op)
			batch := func(ns []byte) *gridpb.BatchRequest { return &gridpb.BatchRequest{Ops: []*gridpb.Op{opOf(ns)}} }
			if name == huge {
				ns = fourMiB(t, func(v []byte) int { return proto.Size(batch(v)) })
			}
			resp, err := cc.c.Batch(gridtest.Context(t), batch(ns))
			if err != nil || len(resp.GetResults()) != 1 || resp.Results[0].Error == nil {
				t.Fatalf("%s batch %s: %.300v %v, want one refused operation", name, op, resp, err)
			}
			e := resp.Results[0].Error
			checkMessage(t, name+" batch "+op, codes.Code(e.Code), e.Message, codes.InvalidArgument, rule)
			cc.alive(t, name+" batch "+op)
		}
		if name == huge {
			ns = fourMiB(t, func(v []byte) int { return proto.Size(&gridpb.AuditRequest{Namespace: v}) })
		}
		stream, err := cc.c.Audit(gridtest.Context(t), &gridpb.AuditRequest{Namespace: ns})
		if err == nil {
			_, err = stream.Recv()
		}
		refused(t, name+" audit", err, codes.InvalidArgument, rule)
		cc.alive(t, name+" audit")
		// A digest leaves no room for a namespace beside it.
		getByDigest := func(ns []byte) *gridpb.GetRequest { return &gridpb.GetRequest{Digest: make([]byte, 16), Namespace: ns} }
		if name == huge {
			ns = fourMiB(t, func(v []byte) int { return proto.Size(getByDigest(v)) })
		}
		_, err = cc.c.Get(gridtest.Context(t), getByDigest(ns))
		refused(t, name+" get by digest", err, codes.InvalidArgument, "invalid digest")
		cc.alive(t, name+" get by digest")
	}
}

// TestArbitraryKeyBytes: keys and entities are arbitrary bytes, so keys
// that are not UTF-8 or hold control bytes work like any other, alone and
// in a Batch.
func TestArbitraryKeyBytes(t *testing.T) {
	n := gridtest.Start(t)
	cc := dialCounting(t, n.Addr())
	ns := []byte("ns")
	key := []byte{0xff, 0x00, 0xfe, '\n'}
	res, err := cc.c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: ns, Key: key, Entity: []byte{0xc3}, Version: 1})
	if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("reserve of a non-UTF-8 key: %v %v", res, err)
	}
	done, err := cc.c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: ns, Key: key, Entity: []byte{0xc3}, Token: res.Token, Result: []byte{0xff}})
	if err != nil || done.Outcome != gridpb.Outcome_OK {
		t.Fatalf("complete of a non-UTF-8 key: %v %v", done, err)
	}
	ops := []*gridpb.Op{
		{Op: &gridpb.Op_Get{Get: &gridpb.GetRequest{Namespace: ns, Key: key, Entity: []byte{0xc3}}}},
		{Op: &gridpb.Op_Reserve{Reserve: &gridpb.ReserveRequest{Namespace: ns, Key: []byte("\x80\x81\x00")}}},
	}
	resp, err := cc.c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Results; r[0].State != gridpb.State_COMPLETED || !bytes.Equal(r[0].Result, []byte{0xff}) || r[1].Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("batch of non-UTF-8 keys: %v", r)
	}
	cc.alive(t, "non-UTF-8 keys")
}

// rawField appends a length-delimited protobuf field to b by hand, so that
// a test sends the bytes a client in any language could send, whatever Go
// type the generated field has.
func rawField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func rawVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// TestAdminRequestsAtTheEdges: Drain and ShardAdmin refuse node ids and
// Raft addresses that are not valid UTF-8, hold control bytes, or run to
// megabytes, with INVALID_ARGUMENT naming the rule in a short message; a
// leadership transfer to a node that is not a voter, or with none named
// in a group of one voter, is FAILED_PRECONDITION naming the node. The
// connection stays up throughout.
func TestAdminRequestsAtTheEdges(t *testing.T) {
	lis := listen(t)
	m := &topology.Map{Epoch: testEpoch, Slots: testSlots, Shards: testShards, Replicas: 1,
		Nodes:         map[topology.NodeID]topology.NodeInfo{"a": {ID: "a", GRPCAddr: lis.Addr().String(), RaftAddr: "127.0.0.1:1", State: topology.NodeActive}},
		ShardReplicas: [][]topology.NodeID{{"a"}, {"a"}}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	n := startViewNode(t, &testView{self: "a", m: m, controlLeader: "a", controlTerm: testTerm}, lis)
	if err := n.host.WaitReady(gridtest.Context(t)); err != nil {
		t.Fatal(err)
	}
	cc := dialCounting(t, n.addr)
	cc.alive(t, "start")
	const idRule, addrRule = "[A-Za-z0-9._-]", "host:port"

	drain := func(id []byte) rawMessage { return rawField(nil, 1, id) }
	huge := fourMiB(t, func(v []byte) int { return len(drain(v)) })
	for name, id := range map[string][]byte{"not UTF-8": {0xff, 0xfe}, "control bytes": []byte("a\x00b"), "4 MiB": huge} {
		var out gridpb.DrainResponse
		err := cc.conn.Invoke(gridtest.Context(t), "/l4xg.grid.v1.Grid/Drain", drain(id), &out, grpc.ForceCodec(rawCodec{}))
		refused(t, "drain of node id "+name, err, codes.InvalidArgument, "invalid node id")
		cc.alive(t, "drain of node id "+name)
	}

	adminRequest := func(action gridpb.ShardAdminAction, node, addr []byte) rawMessage {
		b := rawVarint(nil, 1, 0)
		b = rawVarint(b, 2, uint64(action))
		if node != nil {
			b = rawField(b, 3, node)
		}
		if addr != nil {
			b = rawField(b, 4, addr)
		}
		b = rawVarint(b, 5, testTerm)
		return rawVarint(b, 6, testEpoch)
	}
	admin := func(action gridpb.ShardAdminAction, node, addr []byte) error {
		var out gridpb.ShardAdminResponse
		return cc.conn.Invoke(gridtest.Context(t), "/l4xg.grid.v1.Grid/ShardAdmin", adminRequest(action, node, addr), &out, grpc.ForceCodec(rawCodec{}))
	}
	addr := []byte("127.0.0.1:1")
	hugeID := fourMiB(t, func(v []byte) int { return len(adminRequest(gridpb.ShardAdminAction_ADD_NONVOTER, v, addr)) })
	hugeAddr := fourMiB(t, func(v []byte) int { return len(adminRequest(gridpb.ShardAdminAction_ADD_NONVOTER, []byte("n1"), v)) })
	for _, tc := range []struct {
		name       string
		node, addr []byte
		want       codes.Code
		rule       string
	}{
		{"node id not UTF-8", []byte{0xff, 0xfe}, addr, codes.InvalidArgument, idRule},
		{"node id of control bytes", []byte("n\x01"), addr, codes.InvalidArgument, idRule},
		{"node id of 4 MiB", hugeID, addr, codes.InvalidArgument, "1..64"},
		{"raft address not UTF-8", []byte("n1"), []byte{0xff, ':', '1'}, codes.InvalidArgument, addrRule},
		{"raft address of control bytes", []byte("n1"), []byte("\x01\x02"), codes.InvalidArgument, addrRule},
		{"raft address of 4 MiB", []byte("n1"), hugeAddr, codes.InvalidArgument, "1..255"},
	} {
		err := admin(gridpb.ShardAdminAction_ADD_NONVOTER, tc.node, tc.addr)
		refused(t, "shard admin "+tc.name, err, tc.want, tc.rule)
		cc.alive(t, "shard admin "+tc.name)
	}
	err := admin(gridpb.ShardAdminAction_TRANSFER_LEADERSHIP, []byte("ghost"), addr)
	refused(t, "transfer to a non-member", err, codes.FailedPrecondition, "ghost")
	refused(t, "transfer to a non-member", err, codes.FailedPrecondition, "not a voter")
	cc.alive(t, "transfer to a non-member")
	err = admin(gridpb.ShardAdminAction_TRANSFER_LEADERSHIP, nil, nil)
	refused(t, "transfer in a group of one voter", err, codes.FailedPrecondition, "no other voter")
	cc.alive(t, "transfer in a group of one voter")
	if !n.host.Replica(0).IsLeader() {
		t.Fatal("the refused changes moved shard 0's leadership")
	}
}

// TestBatchBoundsReplayedResults: a Batch of 1000 Reserves of one key
// completed with a 64 KiB result, about 19 KB, gets an answer within
// 4 MiB (gRPC's default receive limit), not the 64 MiB of every copy: the
// first results carry the stored result, in request order, and the others
// are DUPLICATE with the result left out and marked. A Get still returns
// it. The same holds for 1000 Gets.
func TestBatchBoundsReplayedResults(t *testing.T) {
	n := gridtest.Start(t)
	cc := dialCounting(t, n.Addr())
	ns, key := []byte("dup"), []byte("k")
	stored := bytes.Repeat([]byte("r"), digest.MaxResultLen)
	res, err := cc.c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: ns, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: ns, Key: key, Token: res.Token, Result: stored}); err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]*gridpb.Op{
		"reserve": {Op: &gridpb.Op_Reserve{Reserve: &gridpb.ReserveRequest{Namespace: ns, Key: key}}},
		"get":     {Op: &gridpb.Op_Get{Get: &gridpb.GetRequest{Namespace: ns, Key: key}}},
	} {
		req := &gridpb.BatchRequest{Ops: make([]*gridpb.Op, digest.MaxBatchOps)}
		for i := range req.Ops {
			req.Ops[i] = op
		}
		resp, err := cc.c.Batch(gridtest.Context(t), req)
		if err != nil {
			t.Fatalf("batch of %d %ss (%d bytes): %v", len(req.Ops), name, proto.Size(req), err)
		}
		size := proto.Size(resp)
		t.Logf("%d %ss: request %d bytes, response %d bytes", len(req.Ops), name, proto.Size(req), size)
		if size > digest.MaxRequestBytes {
			t.Errorf("%ss: response of %d bytes, want at most %d", name, size, digest.MaxRequestBytes)
		}
		kept := 0
		for i, r := range resp.Results {
			want := gridpb.Outcome_DUPLICATE
			if name == "get" {
				want = gridpb.Outcome_OK
			}
			switch {
			case r.Outcome != want || r.State != gridpb.State_COMPLETED || r.CompletedAtUnixMs == 0:
				t.Fatalf("%s %d: %v, want %v of a COMPLETED record", name, i, r.Outcome, want)
			case bytes.Equal(r.Result, stored) && !r.ResultOmitted:
				if kept != i {
					t.Fatalf("%s %d carries the result after %d left it out: not in request order", name, i, i-kept)
				}
				kept++
			case len(r.Result) != 0 || !r.ResultOmitted:
				t.Fatalf("%s %d: %d result bytes, omitted %v; want the whole result or none and marked", name, i, len(r.Result), r.ResultOmitted)
			}
		}
		if kept == 0 || kept == len(resp.Results) {
			t.Errorf("%ss: %d of %d carry the result, want some but not all", name, kept, len(resp.Results))
		}
		cc.alive(t, name+" batch")
	}
	got, err := cc.c.Get(gridtest.Context(t), &gridpb.GetRequest{Namespace: ns, Key: key})
	if err != nil || !bytes.Equal(got.Result, stored) || got.ResultOmitted {
		t.Fatalf("get after the batches: %d result bytes, omitted %v, %v", len(got.GetResult()), got.GetResultOmitted(), err)
	}
}
