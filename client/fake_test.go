package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/keyspace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeGrid is a transport fake of the grid for failure injection: a small
// in-memory version of the record state machine (DESIGN.md section 2), real
// time, and hooks that refuse RPCs or operations. It is not the grid; the
// integration tests run against the real server.
type fakeGrid struct {
	gridpb.UnimplementedGridServer

	mu         sync.Mutex
	recs       map[string]*fakeRec
	entities   map[string]uint64
	nextToken  uint64
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

type fakeRec struct {
	state       gridpb.State
	token       uint64
	attempt     uint32
	maxAttempts uint32
	deadline    time.Time
	completedAt time.Time
	result      []byte
	fingerprint *uint64
	entity      string
	version     uint64
}

var _ gridpb.GridServer = (*fakeGrid)(nil)

func newFakeGrid() *fakeGrid {
	return &fakeGrid{
		recs:     map[string]*fakeRec{},
		entities: map[string]uint64{},
		rpcs:     map[string]int{},
		changed:  make(chan struct{}),
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
		Shards: []*gridpb.ShardStatus{{Id: 0, RaftState: "Leader", Leader: "fake", Keys: uint64(len(f.recs)), AppliedIndex: 7, StampUnixMs: time.Now().UnixMilli()}},
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

func recKey(ns string, key []byte) string { return ns + "\x00" + string(key) }

func (r *fakeRec) answer(o gridpb.Outcome, now time.Time) *gridpb.OpResult {
	res := &gridpb.OpResult{
		Outcome: o, State: r.state, Token: r.token, Attempt: r.attempt,
		DeadlineUnixMs: r.deadline.UnixMilli(), NowUnixMs: now.UnixMilli(),
		Result: r.result, Fingerprint: r.fingerprint,
	}
	if !r.completedAt.IsZero() {
		res.CompletedAtUnixMs = r.completedAt.UnixMilli()
	}
	return res
}

// eval is the record state machine, simplified. f.mu is held.
func (f *fakeGrid) eval(op *gridpb.Op, now time.Time) (*gridpb.OpResult, error) {
	absent := &gridpb.OpResult{Outcome: gridpb.Outcome_OK, State: gridpb.State_ABSENT, NowUnixMs: now.UnixMilli()}
	lost := &gridpb.OpResult{Outcome: gridpb.Outcome_LEASE_LOST, State: gridpb.State_ABSENT, NowUnixMs: now.UnixMilli()}
	live := func(ns string, key []byte) *fakeRec {
		r := f.recs[recKey(ns, key)]
		if r != nil && (r.state == gridpb.State_COMPLETED || r.state == gridpb.State_STATE_POISONED) && !now.Before(r.deadline) {
			delete(f.recs, recKey(ns, key))
			return nil
		}
		return r
	}
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		q := o.Reserve
		if len(q.GetKey()) == 0 || len(q.GetKey()) > 1024 {
			return nil, status.Errorf(codes.InvalidArgument, "keyspace: key length %d out of range 1..1024", len(q.GetKey()))
		}
		if len(q.GetEntity()) > 0 && q.GetVersion() <= f.entities[string(q.GetEntity())] {
			return &gridpb.OpResult{Outcome: gridpb.Outcome_STALE, State: gridpb.State_ABSENT, NowUnixMs: now.UnixMilli()}, nil
		}
		r := live(string(q.GetNamespace()), q.GetKey())
		if r != nil && q.Fingerprint != nil && r.fingerprint != nil && *q.Fingerprint != *r.fingerprint {
			return r.answer(gridpb.Outcome_MISMATCH, now), nil
		}
		maxAttempts := q.GetMaxAttempts()
		if maxAttempts == 0 {
			maxAttempts = 5
		}
		lease := time.Duration(q.GetLeaseMs()) * time.Millisecond
		switch {
		case r == nil:
			r = &fakeRec{}
			f.recs[recKey(string(q.GetNamespace()), q.GetKey())] = r
		case r.state == gridpb.State_COMPLETED:
			return r.answer(gridpb.Outcome_DUPLICATE, now), nil
		case r.state == gridpb.State_STATE_POISONED:
			return r.answer(gridpb.Outcome_POISONED, now), nil
		case now.Before(r.deadline):
			res := r.answer(gridpb.Outcome_BUSY, now)
			res.Token, res.RetryAfterMs = 0, millis(r.deadline.Sub(now))
			return res, nil
		case r.attempt >= maxAttempts:
			r.state, r.deadline = gridpb.State_STATE_POISONED, now.Add(time.Hour)
			return r.answer(gridpb.Outcome_POISONED, now), nil
		}
		r.state, r.token, r.deadline, r.maxAttempts = gridpb.State_PROCESSING, f.grant(op), now.Add(lease), maxAttempts
		r.attempt++
		r.fingerprint, r.entity, r.version = q.Fingerprint, string(q.GetEntity()), q.GetVersion()
		return r.answer(gridpb.Outcome_ACQUIRED, now), nil
	case *gridpb.Op_Complete:
		q := o.Complete
		r := live(string(q.GetNamespace()), q.GetKey())
		if r == nil || r.token != q.GetToken() || (r.state != gridpb.State_PROCESSING && r.state != gridpb.State_COMPLETED) {
			return lost, nil
		}
		if r.state == gridpb.State_PROCESSING {
			retention := time.Duration(q.GetRetentionMs()) * time.Millisecond
			if retention == 0 {
				retention = 7 * 24 * time.Hour
			}
			r.state, r.deadline, r.completedAt, r.result = gridpb.State_COMPLETED, now.Add(retention), now, q.GetResult()
			if r.entity != "" {
				f.entities[r.entity] = max(f.entities[r.entity], r.version)
			}
		}
		return r.answer(gridpb.Outcome_OK, now), nil
	case *gridpb.Op_Fail:
		q := o.Fail
		r := live(string(q.GetNamespace()), q.GetKey())
		if r == nil || r.token != q.GetToken() {
			return lost, nil
		}
		if r.state == gridpb.State_PROCESSING {
			switch {
			case q.GetPoison() || r.attempt >= r.maxAttempts:
				r.state, r.deadline = gridpb.State_STATE_POISONED, now.Add(time.Hour)
			case q.RetryAfterMs != nil:
				r.state, r.deadline = gridpb.State_FAILED, now.Add(time.Duration(*q.RetryAfterMs)*time.Millisecond)
			default:
				r.state, r.deadline = gridpb.State_FAILED, now.Add(10*time.Millisecond<<r.attempt)
			}
		}
		return r.answer(gridpb.Outcome_OK, now), nil
	case *gridpb.Op_Release:
		q := o.Release
		r := live(string(q.GetNamespace()), q.GetKey())
		if r == nil || r.token != q.GetToken() || r.state != gridpb.State_PROCESSING {
			return lost, nil
		}
		delete(f.recs, recKey(string(q.GetNamespace()), q.GetKey()))
		return absent, nil
	case *gridpb.Op_Extend:
		q := o.Extend
		r := live(string(q.GetNamespace()), q.GetKey())
		if r == nil || r.token != q.GetToken() || r.state != gridpb.State_PROCESSING {
			return lost, nil
		}
		r.deadline = now.Add(time.Duration(q.GetLeaseMs()) * time.Millisecond)
		return r.answer(gridpb.Outcome_OK, now), nil
	case *gridpb.Op_Get:
		r := live(string(o.Get.GetNamespace()), o.Get.GetKey())
		if r == nil {
			return absent, nil
		}
		return r.answer(gridpb.Outcome_OK, now), nil
	case *gridpb.Op_Forget:
		q := o.Forget
		_, existed := f.recs[recKey(string(q.GetNamespace()), q.GetKey())]
		delete(f.recs, recKey(string(q.GetNamespace()), q.GetKey()))
		res := absent
		res.Existed = existed
		return res, nil
	default:
		return nil, status.Error(codes.InvalidArgument, "empty operation")
	}
}

// steal replaces the token of a key's lease, as a takeover by another
// consumer would.
func (f *fakeGrid) steal(ns, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.recs[recKey(ns, []byte(key))]; r != nil {
		r.token = f.nextTokenOf(r.token)
	}
}

// grant is the token of a new lease granted by the reserve op: it names the
// op's shard in a cluster, as the grid's tokens do (keyspace.TokenLayout).
// f.mu is held.
func (f *fakeGrid) grant(op *gridpb.Op) uint64 {
	f.nextToken++
	if f.cluster == nil {
		return f.nextToken << 16
	}
	l, err := keyspace.NewTokenLayout(f.cluster.shardOf(op), len(f.cluster.leads))
	if err != nil {
		panic(err)
	}
	return l.Token(f.nextToken, 0)
}

// nextTokenOf is a new token of the shard that granted tok. f.mu is held.
func (f *fakeGrid) nextTokenOf(tok uint64) uint64 {
	f.nextToken++
	if f.cluster == nil {
		return f.nextToken << 16
	}
	s, _ := keyspace.TokenShard(tok, len(f.cluster.leads))
	return keyspace.TokenLayout{Shard: uint32(s), Bits: keyspace.TokenBits(len(f.cluster.leads))}.Token(f.nextToken, 0)
}

// opKey returns the namespace-less key and kind of an operation.
func opKey(op *gridpb.Op) (kind, key string) {
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		return "reserve", string(o.Reserve.GetKey())
	case *gridpb.Op_Complete:
		return "complete", string(o.Complete.GetKey())
	case *gridpb.Op_Fail:
		return "fail", string(o.Fail.GetKey())
	case *gridpb.Op_Release:
		return "release", string(o.Release.GetKey())
	case *gridpb.Op_Extend:
		return "extend", string(o.Extend.GetKey())
	case *gridpb.Op_Get:
		return "get", string(o.Get.GetKey())
	case *gridpb.Op_Forget:
		return "forget", string(o.Forget.GetKey())
	}
	return "", ""
}

// countKind counts the received operations of one kind.
func countKind(ops []*gridpb.Op, kind string) int {
	n := 0
	for _, op := range ops {
		if k, _ := opKey(op); k == kind {
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
	if tok := settleToken(op); tok != 0 {
		if s, ok := keyspace.TokenShard(tok, len(fc.leads)); ok {
			return s
		}
	}
	var d keyspace.Digest
	if raw := op.GetGet().GetDigest(); len(raw) == 16 {
		d = keyspace.Digest{Hi: binary.BigEndian.Uint64(raw), Lo: binary.BigEndian.Uint64(raw[8:])}
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
		d = keyspace.RecordDigest(string(k.GetNamespace()), k.GetKey(), k.GetEntity())
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
