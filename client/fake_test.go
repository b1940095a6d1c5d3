package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
	resp := &gridpb.BatchResponse{}
	for _, op := range req.GetOps() {
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
	return f.apply(op)
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
		NodeId: "fake", Version: "test", Slots: 4096, NowUnixMs: time.Now().UnixMilli(),
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
		r := live(q.GetNamespace(), q.GetKey())
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
			f.recs[recKey(q.GetNamespace(), q.GetKey())] = r
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
		f.nextToken++
		r.state, r.token, r.deadline, r.maxAttempts = gridpb.State_PROCESSING, f.nextToken<<16, now.Add(lease), maxAttempts
		r.attempt++
		r.fingerprint, r.entity, r.version = q.Fingerprint, string(q.GetEntity()), q.GetVersion()
		return r.answer(gridpb.Outcome_ACQUIRED, now), nil
	case *gridpb.Op_Complete:
		q := o.Complete
		r := live(q.GetNamespace(), q.GetKey())
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
		r := live(q.GetNamespace(), q.GetKey())
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
		r := live(q.GetNamespace(), q.GetKey())
		if r == nil || r.token != q.GetToken() || r.state != gridpb.State_PROCESSING {
			return lost, nil
		}
		delete(f.recs, recKey(q.GetNamespace(), q.GetKey()))
		return absent, nil
	case *gridpb.Op_Extend:
		q := o.Extend
		r := live(q.GetNamespace(), q.GetKey())
		if r == nil || r.token != q.GetToken() || r.state != gridpb.State_PROCESSING {
			return lost, nil
		}
		r.deadline = now.Add(time.Duration(q.GetLeaseMs()) * time.Millisecond)
		return r.answer(gridpb.Outcome_OK, now), nil
	case *gridpb.Op_Get:
		r := live(o.Get.GetNamespace(), o.Get.GetKey())
		if r == nil {
			return absent, nil
		}
		return r.answer(gridpb.Outcome_OK, now), nil
	case *gridpb.Op_Forget:
		q := o.Forget
		_, existed := f.recs[recKey(q.GetNamespace(), q.GetKey())]
		delete(f.recs, recKey(q.GetNamespace(), q.GetKey()))
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
		f.nextToken++
		r.token = f.nextToken << 16
	}
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

// waitCond waits until cond holds, checking every millisecond, or fails the
// test after 10 s.
func waitCond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
