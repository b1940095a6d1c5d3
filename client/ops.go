package client

import (
	"context"
	"fmt"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// Op is one operation for Batch, made by ReserveOp, CompleteOp, FailOp,
// ReleaseOp, ExtendOp, GetOp or ForgetOp. The zero Op is invalid.
type Op struct {
	pb *gridpb.Op
}

// settles reports whether a LEASE_LOST answer to the operation is an error
// of the holder (Complete, Fail, Release, Extend).
func (o Op) settles() bool {
	switch o.pb.GetOp().(type) {
	case *gridpb.Op_Complete, *gridpb.Op_Fail, *gridpb.Op_Release, *gridpb.Op_Extend:
		return true
	}
	return false
}

// outcomeErr is the error a call returns for the grid's answer r: a lost
// lease fails the settling operations; other outcomes are answers.
func (o Op) outcomeErr(r Result) error {
	if r.Outcome == OutcomeUnspecified {
		return fmt.Errorf("%w: no outcome", errProtocol)
	}
	if r.Outcome == OutcomeLeaseLost && o.settles() {
		return ErrLeaseLost
	}
	return nil
}

// ReserveOp is a Reserve operation for Batch. Without WithLease the lease is
// DefaultLease.
func ReserveOp(ns, key string, opts ...ReserveOption) Op {
	r := &gridpb.ReserveRequest{Namespace: ns, Key: []byte(key), LeaseMs: millis(DefaultLease)}
	for _, o := range opts {
		o.applyReserve(r)
	}
	return Op{&gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: r}}}
}

// CompleteOp is a Complete operation for Batch.
func CompleteOp(ns, key string, token uint64, opts ...CompleteOption) Op {
	r := &gridpb.CompleteRequest{Namespace: ns, Key: []byte(key), Token: token}
	for _, o := range opts {
		o.applyComplete(r)
	}
	return Op{&gridpb.Op{Op: &gridpb.Op_Complete{Complete: r}}}
}

// FailOp is a Fail operation for Batch.
func FailOp(ns, key string, token uint64, opts ...FailOption) Op {
	r := &gridpb.FailRequest{Namespace: ns, Key: []byte(key), Token: token}
	for _, o := range opts {
		o.applyFail(r)
	}
	return Op{&gridpb.Op{Op: &gridpb.Op_Fail{Fail: r}}}
}

// ReleaseOp is a Release operation for Batch.
func ReleaseOp(ns, key string, token uint64, opts ...ReleaseOption) Op {
	r := &gridpb.ReleaseRequest{Namespace: ns, Key: []byte(key), Token: token}
	for _, o := range opts {
		o.applyRelease(r)
	}
	return Op{&gridpb.Op{Op: &gridpb.Op_Release{Release: r}}}
}

// ExtendOp is an Extend operation for Batch. A lease <= 0 means DefaultLease.
func ExtendOp(ns, key string, token uint64, lease time.Duration, opts ...ExtendOption) Op {
	if lease <= 0 {
		lease = DefaultLease
	}
	r := &gridpb.ExtendRequest{Namespace: ns, Key: []byte(key), Token: token, LeaseMs: millis(lease)}
	for _, o := range opts {
		o.applyExtend(r)
	}
	return Op{&gridpb.Op{Op: &gridpb.Op_Extend{Extend: r}}}
}

// GetOp is a Get operation for Batch.
func GetOp(ns, key string, opts ...GetOption) Op {
	r := &gridpb.GetRequest{Namespace: ns, Key: []byte(key)}
	for _, o := range opts {
		o.applyGet(r)
	}
	return Op{&gridpb.Op{Op: &gridpb.Op_Get{Get: r}}}
}

// ForgetOp is a Forget operation for Batch.
func ForgetOp(ns, key string, opts ...ForgetOption) Op {
	r := &gridpb.ForgetRequest{Namespace: ns, Key: []byte(key)}
	for _, o := range opts {
		o.applyForget(r)
	}
	return Op{&gridpb.Op{Op: &gridpb.Op_Forget{Forget: r}}}
}

// Reserve takes the processing lease of a key, or says why not. Every
// outcome (ACQUIRED, BUSY, DUPLICATE, POISONED, STALE, MISMATCH) comes back in
// the Result with a nil error; Result.Err turns it into an error. The error
// is for calls that failed.
//
// A Reserve retried after a transport failure may have been granted the
// first time: it then comes back BUSY, held by a lease whose token this
// caller never saw. Process reports that as a *BusyError with AfterRetry set.
func (c *Client) Reserve(ctx context.Context, ns, key string, opts ...ReserveOption) (Result, error) {
	r, _, err := c.one(ctx, ReserveOp(ns, key, opts...))
	return r, err
}

// Complete settles a held key as COMPLETED, storing WithResult's bytes for
// duplicates during WithRetention (server default 7 days). Repeating it after
// success answers OK again. A superseded token returns ErrLeaseLost.
func (c *Client) Complete(ctx context.Context, ns, key string, token uint64, opts ...CompleteOption) (Result, error) {
	r, _, err := c.one(ctx, CompleteOp(ns, key, token, opts...))
	return r, err
}

// Fail settles a held key as FAILED, retryable after WithRetryAfter or the
// grid's exponential backoff, or as POISONED with WithPoison or when its
// attempts are spent. A superseded token returns ErrLeaseLost.
func (c *Client) Fail(ctx context.Context, ns, key string, token uint64, opts ...FailOption) (Result, error) {
	r, _, err := c.one(ctx, FailOp(ns, key, token, opts...))
	return r, err
}

// Release gives a held key back without counting an attempt (nack, graceful
// shutdown). A key held under another token returns ErrLeaseLost; releasing a
// key nobody holds answers OK, so a retried Release succeeds.
func (c *Client) Release(ctx context.Context, ns, key string, token uint64, opts ...ReleaseOption) (Result, error) {
	r, _, err := c.one(ctx, ReleaseOp(ns, key, token, opts...))
	return r, err
}

// Extend renews a held lease to lease from the grid's now (<= 0 means
// DefaultLease). A superseded token, or a key no longer PROCESSING, returns
// ErrLeaseLost.
func (c *Client) Extend(ctx context.Context, ns, key string, token uint64, lease time.Duration, opts ...ExtendOption) (Result, error) {
	r, _, err := c.one(ctx, ExtendOp(ns, key, token, lease, opts...))
	return r, err
}

// Get returns the record of a key, State ABSENT when there is none. The read
// is linearizable unless WithStaleOK.
func (c *Client) Get(ctx context.Context, ns, key string, opts ...GetOption) (Result, error) {
	r, _, err := c.one(ctx, GetOp(ns, key, opts...))
	return r, err
}

// Forget removes a key's record so that its message is processed again;
// Result.Existed says whether there was one.
func (c *Client) Forget(ctx context.Context, ns, key string, opts ...ForgetOption) (Result, error) {
	r, _, err := c.one(ctx, ForgetOp(ns, key, opts...))
	return r, err
}

// one runs a single operation; sends is how many times it was sent.
func (c *Client) one(ctx context.Context, op Op) (Result, int, error) {
	pb, sends, err := c.do(ctx, op.pb)
	if err != nil {
		return Result{}, sends, err
	}
	r := fromPB(pb)
	return r, sends, op.outcomeErr(r)
}

// Batch runs many operations on many keys and returns one Result and one
// error per operation, in order, each as the single call would have: errs[i]
// is nil, a refusal of that operation (ErrInvalidArgument, ...), or
// ErrLeaseLost for a settling operation whose lease was lost. The grid
// applies the writes of one Batch RPC in order, per shard, and runs its reads
// (Get) after its writes.
//
// Batch sends the operations itself, bypassing automatic batching, split
// into Batch RPCs of at most the client's max batch size (and 4 MiB), one
// after the other. Operations refused as unavailable are retried under the
// client's retry policy. The returned error is non-nil when some operations
// got no answer at all (an RPC failed for good, ctx ended, the client
// closed): their errs[i] says whether they were sent (outcome unknown) or not.
// results and errs always have len(ops) elements.
func (c *Client) Batch(ctx context.Context, ops []Op) ([]Result, []error, error) {
	results := make([]Result, len(ops))
	errs := make([]error, len(ops))
	for i, op := range ops {
		if op.pb.GetOp() == nil {
			err := fmt.Errorf("%w: operation %d is empty", ErrInvalidArgument, i)
			for j := range errs {
				errs[j] = err
			}
			return results, errs, err
		}
	}
	var failed error
	for start := 0; start < len(ops); {
		end := chunkEnd(ops, start, c.cfg.maxBatch, maxBatchBytes)
		if failed != nil {
			for i := start; i < end; i++ {
				errs[i] = fmt.Errorf("client: not sent: %w", failed)
			}
		} else {
			failed = c.batchChunk(ctx, ops[start:end], results[start:end], errs[start:end])
		}
		start = end
	}
	return results, errs, failed
}

// chunkEnd is the end of the chunk of ops starting at start: at most maxOps
// operations and maxBytes bytes, and never empty.
func chunkEnd(ops []Op, start, maxOps, maxBytes int) int {
	bytes := 0
	end := start
	for end < len(ops) && end-start < maxOps {
		size := proto.Size(ops[end].pb)
		if end > start && bytes+size > maxBytes {
			break
		}
		bytes += size
		end++
	}
	return end
}

// batchChunk sends one chunk, resending the operations refused as
// unavailable, and fills results and errs. When the last RPC failed as a
// whole, it marks the operations still without an answer and returns the
// error.
func (c *Client) batchChunk(ctx context.Context, ops []Op, results []Result, errs []error) error {
	pending := make([]int, len(ops))
	for i := range pending {
		pending[i] = i
	}
	rpcFailed := true // until an RPC answers
	_, err := c.retry(ctx, func(ctx context.Context) error {
		req := &gridpb.BatchRequest{Ops: make([]*gridpb.Op, len(pending))}
		for j, i := range pending {
			req.Ops[j] = ops[i].pb
		}
		resp, err := c.rpc.Batch(ctx, req)
		rpcFailed = err != nil || len(resp.GetResults()) != len(pending)
		if err != nil {
			return err
		}
		if rpcFailed {
			return fmt.Errorf("%w: %d results for %d operations", errProtocol, len(resp.GetResults()), len(pending))
		}
		var again []int
		for j, i := range pending {
			pb := resp.Results[j]
			if e := pb.GetError(); e != nil {
				results[i], errs[i] = Result{}, fromCode(codes.Code(e.GetCode()), e.GetMessage())
				if retryable(errs[i]) {
					again = append(again, i)
				}
				continue
			}
			results[i] = fromPB(pb)
			errs[i] = ops[i].outcomeErr(results[i])
		}
		pending = again
		if len(again) > 0 {
			// Resent alone; their errs stand if the attempts run out.
			return fmt.Errorf("%w: %d operations of the batch", ErrUnavailable, len(again))
		}
		return nil
	})
	if !rpcFailed {
		return nil // every operation has its answer, maybe a refusal
	}
	for _, i := range pending {
		errs[i] = fmt.Errorf("client: outcome unknown: %w", err)
	}
	return err
}
