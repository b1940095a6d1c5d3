package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/digest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeGrid is a transport fake of the grid for failure injection: a
// record model of its own (fakeModel: the grid's record rules and wire
// answers, each operation but a Get one entry of its own, stamped with the
// real time) and hooks that refuse RPCs or operations. It is not the grid
// (no Raft, no routing but the fake cluster's); the integration tests run
// against the real server.
type fakeGrid struct {
	gridpb.UnimplementedGridServer

	mu         sync.Mutex
	model      *fakeModel
	noIDs      bool         // a grid from before request ids: it drops them
	ops        []*gridpb.Op // every operation received, in order
	batchSizes []int
	rpcs       map[string]int
	hooks      fakeHooks
	changed    chan struct{} // closed and replaced on every received operation
	server     *grpc.Server

	// The fake answers ClusterMap with Unimplemented (a node older than
	// clustering), as standalone when standalone is set, or as node self of
	// cluster (see fakeCluster). Both are set before it serves.
	standalone bool
	cluster    *fakeCluster
	self       int
	redirects  int // operations refused with a Redirect
	routed     int // operation RPCs that carried grid-redirect
	bare       int // operation RPCs that did not
}

// fakeHooks inject failures. Each may be nil.
type fakeHooks struct {
	// rpc runs first in every RPC; an error fails the whole RPC.
	rpc func(ctx context.Context, method string) error
	// op runs before one operation is applied; an error refuses it.
	op func(op *gridpb.Op) error
	// after runs after one operation was applied; an error replaces its
	// answer (the answer is lost).
	after func(op *gridpb.Op, res *gridpb.OpResult) error
	// clusterMap runs first in ClusterMap (the rpc hook does not, so that
	// tests counting operation RPCs do not count map fetches).
	clusterMap func() error
}

var _ gridpb.GridServer = (*fakeGrid)(nil)

func newFakeGrid() *fakeGrid {
	return &fakeGrid{
		model:   newFakeModel(),
		rpcs:    map[string]int{},
		changed: make(chan struct{}),
	}
}

// serveFake starts f on a real gRPC server on 127.0.0.1:0 and returns its
// address; both are stopped at the end of the test.
func serveFake(t testing.TB, f *fakeGrid) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	gridpb.RegisterGridServer(s, f)
	f.mu.Lock()
	f.server = s
	f.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}

// dialFake serves a new fake and dials it.
func dialFake(t testing.TB, opts ...Option) (*Client, *fakeGrid) {
	t.Helper()
	f := newFakeGrid()
	addr := serveFake(t, f)
	c, err := Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, f
}

// shutdown stops the fake's server: the node is gone.
func (f *fakeGrid) shutdown() {
	f.mu.Lock()
	s := f.server
	f.mu.Unlock()
	s.Stop()
}

// counters returns the fake's routing counters: operations redirected, and
// operation RPCs with and without the grid-redirect header.
func (f *fakeGrid) counters() (redirects, routed, bare int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.redirects, f.routed, f.bare
}

// ignoreRequestIDs makes f a grid from before request ids: a Reserve's
// request id is dropped, so a resend of a granted Reserve finds the lease
// held (BUSY) instead of getting its grant again.
func (f *fakeGrid) ignoreRequestIDs() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noIDs = true
}

func (f *fakeGrid) setHooks(h fakeHooks) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hooks = h
}

func (f *fakeGrid) getHooks() fakeHooks {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hooks
}

func (f *fakeGrid) rpcCount(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rpcs[method]
}

func (f *fakeGrid) sizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.batchSizes...)
}

func (f *fakeGrid) received() []*gridpb.Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*gridpb.Op(nil), f.ops...)
}

// waitOps waits until cond holds for the operations received so far.
func (f *fakeGrid) waitOps(t testing.TB, what string, cond func(ops []*gridpb.Op) bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok, ch := cond(f.ops), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (f *fakeGrid) count(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rpcs[method]++
}

func (f *fakeGrid) Batch(ctx context.Context, req *gridpb.BatchRequest) (*gridpb.BatchResponse, error) {
	f.count("Batch")
	f.mu.Lock()
	f.batchSizes = append(f.batchSizes, len(req.GetOps()))
	f.mu.Unlock()
	if h := f.getHooks().rpc; h != nil {
		if err := h(ctx, "Batch"); err != nil {
			return nil, err
		}
	}
	if err := digest.ValidateBatchLen(len(req.GetOps())); err != nil {
		code := codes.InvalidArgument
		if errors.Is(err, digest.ErrBatchTooLarge) {
			code = codes.ResourceExhausted
		}
		return nil, status.Error(code, err.Error())
	}
	redirect := f.noteHeader(ctx)
	resp := &gridpb.BatchResponse{}
	for _, op := range req.GetOps() {
		if rd := f.redirectFor(redirect, op); rd != nil {
			resp.Results = append(resp.Results, &gridpb.OpResult{Error: &gridpb.OpError{
				Code: int32(codes.Unavailable), Message: "fake: not the shard's leader", Redirect: rd,
			}})
			continue
		}
		res, err := f.apply(op)
		if err != nil {
			st := status.Convert(err)
			res = &gridpb.OpResult{Error: &gridpb.OpError{Code: int32(st.Code()), Message: st.Message()}}
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}

func (f *fakeGrid) unary(ctx context.Context, method string, op *gridpb.Op) (*gridpb.OpResult, error) {
	f.count(method)
	if h := f.getHooks().rpc; h != nil {
		if err := h(ctx, method); err != nil {
			return nil, err
		}
	}
	if rd := f.redirectFor(f.noteHeader(ctx), op); rd != nil {
		st, err := status.New(codes.Unavailable, "fake: not the shard's leader").WithDetails(rd)
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	return f.apply(op)
}

// noteHeader counts an operation RPC by whether it carried grid-redirect,
// and reports whether it did.
func (f *fakeGrid) noteHeader(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(redirectHeader)
	redirect := len(v) == 1 && v[0] == "1"
	f.mu.Lock()
	defer f.mu.Unlock()
	if redirect {
		f.routed++
	} else {
		f.bare++
	}
	return redirect
}

// redirectFor is the Redirect refusing op when the fake is a cluster node
// that does not lead op's shard and the client asked for Redirects. Without
// the header the fake serves every operation, as a forwarding node would.
func (f *fakeGrid) redirectFor(asked bool, op *gridpb.Op) *gridpb.Redirect {
	if f.cluster == nil || !asked {
		return nil
	}
	rd := f.cluster.redirect(f.self, op)
	if rd != nil {
		f.mu.Lock()
		f.redirects++
		f.mu.Unlock()
	}
	return rd
}

func (f *fakeGrid) ClusterMap(ctx context.Context, req *gridpb.ClusterMapRequest) (*gridpb.ClusterMapResponse, error) {
	f.count("ClusterMap")
	if h := f.getHooks().clusterMap; h != nil {
		if err := h(); err != nil {
			return nil, err
		}
	}
	switch {
	case f.cluster != nil:
		return f.cluster.mapFor(f.self), nil
	case f.standalone:
		return &gridpb.ClusterMapResponse{Standalone: true, NodeId: "fake", Slots: 4096, ShardCount: 1, Replicas: 1}, nil
	}
	return f.UnimplementedGridServer.ClusterMap(ctx, req)
}

func (f *fakeGrid) Reserve(ctx context.Context, r *gridpb.ReserveRequest) (*gridpb.OpResult, error) {
	return f.unary(ctx, "Reserve", &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: r}})
}

func (f *fakeGrid) Complete(ctx context.Context, r *gridpb.CompleteRequest) (*gridpb.OpResult, error) {
	return f.unary(ctx, "Complete", &gridpb.Op{Op: &gridpb.Op_Complete{Complete: r}})
}

func (f *fakeGrid) Fail(ctx context.Context, r *gridpb.FailRequest) (*gridpb.OpResult, error) {
	return f.unary(ctx, "Fail", &gridpb.Op{Op: &gridpb.Op_Fail{Fail: r}})
}

func (f *fakeGrid) Release(ctx context.Context, r *gridpb.ReleaseRequest) (*gridpb.OpResult, error) {
	return f.unary(ctx, "Release", &gridpb.Op{Op: &gridpb.Op_Release{Release: r}})
}

func (f *fakeGrid) Extend(ctx context.Context, r *gridpb.ExtendRequest) (*gridpb.OpResult, error) {
	return f.unary(ctx, "Extend", &gridpb.Op{Op: &gridpb.Op_Extend{Extend: r}})
}

func (f *fakeGrid) Get(ctx context.Context, r *gridpb.GetRequest) (*gridpb.OpResult, error) {
	return f.unary(ctx, "Get", &gridpb.Op{Op: &gridpb.Op_Get{Get: r}})
}

func (f *fakeGrid) Forget(ctx context.Context, r *gridpb.ForgetRequest) (*gridpb.OpResult, error) {
	return f.unary(ctx, "Forget", &gridpb.Op{Op: &gridpb.Op_Forget{Forget: r}})
}

func (f *fakeGrid) Status(ctx context.Context, _ *gridpb.StatusRequest) (*gridpb.StatusResponse, error) {
	f.count("Status")
	if h := f.getHooks().rpc; h != nil {
		if err := h(ctx, "Status"); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &gridpb.StatusResponse{
		NodeId: "fake", Version: "test", Slots: 4096, ShardCount: 1, MapEpoch: 3, ControlState: "Follower", NowUnixMs: time.Now().UnixMilli(),
		Shards: []*gridpb.ShardStatus{{Id: 0, RaftState: "Leader", Leader: "fake", Keys: uint64(len(f.model.records)), AppliedIndex: 7, StampUnixMs: time.Now().UnixMilli()}},
	}, nil
}

// apply records and evaluates one operation.
func (f *fakeGrid) apply(op *gridpb.Op) (*gridpb.OpResult, error) {
	hooks := f.getHooks()
	f.mu.Lock()
	f.ops = append(f.ops, op)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	if hooks.op != nil {
		if err := hooks.op(op); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	res, err := f.eval(op, time.Now())
	f.mu.Unlock()
	if err == nil && hooks.after != nil {
		if err := hooks.after(op, res); err != nil {
			return nil, err
		}
	}
	return res, err
}

// eval runs op on the fake's model at now, as a shard's leader does: a
// Get is a read, any other operation an entry of its own. f.mu is held.
func (f *fakeGrid) eval(op *gridpb.Op, now time.Time) (*gridpb.OpResult, error) {
	cmd, err := fakeCommand(op)
	if err != nil {
		return nil, err
	}
	if f.noIDs {
		cmd.requestID = ""
	}
	if cmd.kind == fakeGet {
		return f.model.read(&cmd, now), nil
	}
	return f.model.apply(now, f.layout(op), cmd)[0], nil
}

// layout is the token layout of op's shard in a cluster (tokens name
// their shard, as the grid's do), and the single shard's otherwise.
func (f *fakeGrid) layout(op *gridpb.Op) digest.TokenLayout {
	if f.cluster == nil {
		return digest.TokenLayout{}
	}
	l, err := digest.NewTokenLayout(f.cluster.shardOf(op), len(f.cluster.leads))
	if err != nil {
		panic(err)
	}
	return l
}

// steal makes another consumer the holder of a key's lease, under a new
// token: the key is forgotten and reserved again, for an hour, in one
// entry.
func (f *fakeGrid) steal(ns, key string) {
	reserve := ReserveOp(ns, key, WithLease(time.Hour)).pb
	forget, err := fakeCommand(ForgetOp(ns, key).pb)
	if err != nil {
		panic(err)
	}
	again, err := fakeCommand(reserve)
	if err != nil {
		panic(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.model.apply(time.Now(), f.layout(reserve), forget, again)
}

// countKind counts the received operations of one kind.
func countKind(ops []*gridpb.Op, kind string) int {
	n := 0
	for _, op := range ops {
		if k, _ := wiretap.OpKey(op); k == kind {
			n++
		}
	}
	return n
}

// fastRetry is a retry policy for tests: quick, bounded.
func fastRetry(attempts int) Option {
	return WithRetryPolicy(RetryPolicy{Attempts: attempts, BaseBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond})
}

// testCtx is a context that ends with the test, bounded so a hang fails.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fakeCluster makes fakes the nodes of one cluster: a cluster map they all
// answer ClusterMap with, and the truth of which node leads each shard. A
// node refuses an operation on a shard it does not lead with a Redirect to
// the true leader, as a real node does for a client sending grid-redirect.
// The map's leader hints may lag the truth, as a real map's may.
type fakeCluster struct {
	slots uint32
	nodes []*fakeGrid
	addrs []string

	mu       sync.Mutex
	epoch    uint64
	leads    []int // per shard: the node that leads it
	hints    []int // per shard: the leader the map names
	override func(self, shard int) *gridpb.Redirect
}

// newFakeCluster serves n fake nodes holding shards shards over 64 slots;
// shard s is led by node s%n, and the map says so, at epoch 1.
func newFakeCluster(t testing.TB, n, shards int) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{slots: 64, epoch: 1}
	for i := range n {
		f := newFakeGrid()
		f.cluster, f.self = fc, i
		fc.nodes = append(fc.nodes, f)
		fc.addrs = append(fc.addrs, serveFake(t, f))
	}
	for s := range shards {
		fc.leads = append(fc.leads, s%n)
	}
	fc.hints = slices.Clone(fc.leads)
	return fc
}

// dial dials the cluster through the given seeds (default: node 0).
func (fc *fakeCluster) dial(t testing.TB, seeds string, opts ...Option) *Client {
	t.Helper()
	if seeds == "" {
		seeds = fc.addrs[0]
	}
	c, err := Dial(context.Background(), seeds, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func fakeNodeID(n int) string { return fmt.Sprintf("n%d", n) }

// shardOf computes an operation's shard the way a grid node does: the
// shard a settle's token names, else the record digest (or the digest a Get
// carries), its slot, the slot's shard.
func (fc *fakeCluster) shardOf(op *gridpb.Op) int {
	if tok := op.Token(); tok != 0 {
		if s, ok := digest.TokenShard(tok, len(fc.leads)); ok {
			return s
		}
	}
	var d digest.Digest
	if raw := op.GetGet().GetDigest(); len(raw) == 16 {
		d = digest.Digest{Hi: binary.BigEndian.Uint64(raw), Lo: binary.BigEndian.Uint64(raw[8:])}
	} else {
		var k interface {
			GetNamespace() []byte
			GetKey() []byte
			GetEntity() []byte
		}
		switch o := op.GetOp().(type) {
		case *gridpb.Op_Reserve:
			k = o.Reserve
		case *gridpb.Op_Complete:
			k = o.Complete
		case *gridpb.Op_Fail:
			k = o.Fail
		case *gridpb.Op_Release:
			k = o.Release
		case *gridpb.Op_Extend:
			k = o.Extend
		case *gridpb.Op_Get:
			k = o.Get
		case *gridpb.Op_Forget:
			k = o.Forget
		}
		d = digest.Record(string(k.GetNamespace()), k.GetKey(), k.GetEntity())
	}
	return int(uint64(d.Slot(fc.slots)) * uint64(len(fc.leads)) / uint64(fc.slots))
}

// keyOn returns the i-th key of namespace "ns" whose record lives on shard.
func (fc *fakeCluster) keyOn(shard, i int) string {
	for n := 0; ; n++ {
		key := fmt.Sprintf("k%d", n)
		if fc.shardOf(ReserveOp("ns", key).pb) == shard {
			if i == 0 {
				return key
			}
			i--
		}
	}
}

// leader is the node that truly leads the shard of op.
func (fc *fakeCluster) leader(op *gridpb.Op) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.leads[fc.shardOf(op)]
}

// move makes node to the leader of shard; with inMap the map says so too,
// at a new epoch.
func (fc *fakeCluster) move(shard, to int, inMap bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.leads[shard] = to
	if inMap {
		fc.hints[shard] = to
		fc.epoch++
	}
}

// setOverride makes every node answer with redirect(self, shard) instead of
// by the truth (nil: serve).
func (fc *fakeCluster) setOverride(redirect func(self, shard int) *gridpb.Redirect) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.override = redirect
}

func (fc *fakeCluster) redirect(self int, op *gridpb.Op) *gridpb.Redirect {
	shard := fc.shardOf(op)
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.override != nil {
		return fc.override(self, shard)
	}
	l := fc.leads[shard]
	if l == self {
		return nil
	}
	return &gridpb.Redirect{Shard: uint32(shard), LeaderId: fakeNodeID(l), LeaderAddr: fc.addrs[l], Epoch: fc.epoch}
}

func (fc *fakeCluster) mapFor(self int) *gridpb.ClusterMapResponse {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	m := &gridpb.ClusterMapResponse{
		Epoch: fc.epoch, Slots: fc.slots, ShardCount: uint32(len(fc.leads)), Replicas: uint32(len(fc.nodes)),
		NodeId: fakeNodeID(self), ControlLeader: fakeNodeID(0),
	}
	for i, a := range fc.addrs {
		m.Nodes = append(m.Nodes, &gridpb.ClusterNode{Id: fakeNodeID(i), GrpcAddr: a, RaftAddr: "raft-" + a, State: "active", Alive: true})
	}
	for s, h := range fc.hints {
		sh := &gridpb.ClusterShard{Id: uint32(s), Leader: fakeNodeID(h), Replicas: []string{fakeNodeID(h)}}
		for i := range fc.nodes {
			if i != h {
				sh.Replicas = append(sh.Replicas, fakeNodeID(i))
			}
		}
		m.Shards = append(m.Shards, sh)
	}
	return m
}

// redirects is the number of operations refused with a Redirect, by all
// nodes.
func (fc *fakeCluster) redirects() int {
	n := 0
	for _, f := range fc.nodes {
		r, _, _ := f.counters()
		n += r
	}
	return n
}
