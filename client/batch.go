package client

import (
	"context"
	"fmt"
)

// Batch runs many operations on many keys and returns one Result and one
// error per operation, in order, each as the single call would have: errs[i]
// is nil, a refusal of that operation (ErrInvalidArgument, ...), or
// ErrLeaseLost for a settling operation whose lease was lost. The grid
// applies the writes of one Batch RPC in order, per shard, and runs its reads
// (Get) after its writes.
//
// Batch sends the operations itself, bypassing automatic batching. It splits
// them by the node leading their shard, and each node's part into Batch RPCs
// of at most the client's max batch size (and 4 MiB). The parts of different
// nodes are sent in parallel; the RPCs of one node one after the other, in
// the order of ops. Operations refused with a Redirect are sent again at once
// to the leader it names. Operations refused as unavailable, and those of an
// RPC that failed as unavailable, are sent again under the client's retry
// policy, after a backoff; an RPC that failed also holds back the operations
// behind it for the same node until then.
//
// The returned error is non-nil when some operations got no answer at all (an
// RPC failed for good, ctx ended, the client closed): their errs[i] says
// whether they were sent (outcome unknown) or not. An operation still refused
// as unavailable when the retries are spent is labelled outcome unknown as
// well unless every send of it was refused with a Redirect. results and errs
// always have len(ops) elements.
//
// One Batch response carries at most 4 MiB of stored results (the grid's
// request limit), in request order: from the first result that does not
// fit, the stored results of the later operations are left out and their
// Result.ResultOmitted is set. Nothing else of their answers changes, and
// the records keep their results: Get returns them. (Single calls, which
// automatic batching sends together, fetch a result left out of theirs
// with a Get.)
//
// Each Result says how many sends its operation took and whether its answer
// came from a resend (Sends, Resent), counted per operation. An ACQUIRED
// Reserve or an OK Extend carries its local safe deadline (SafeUntil), from
// the client's clock when Batch was called. Each Reserve keeps the request
// id its ReserveOp drew in all its resends.
func (c *Client) Batch(ctx context.Context, ops []Op) ([]Result, []error, error) {
	results, errs := make([]Result, len(ops)), make([]error, len(ops))
	for i, op := range ops {
		if err := op.check(); err != nil {
			err = fmt.Errorf("operation %d: %w", i, err)
			for j := range errs {
				errs[j] = err
			}
			return results, errs, err
		}
	}
	r := c.exec(ctx, ops, false)
	for i := range r.st {
		results[i], errs[i] = r.st[i].result, r.st[i].err
	}
	return results, errs, r.first
}

// chunkEnd is the end of the chunk of ops starting at start: at most maxOps
// operations and maxBytes bytes, and never empty.
func chunkEnd(ops []Op, start, maxOps, maxBytes int) int {
	bytes := 0
	end := start
	for end < len(ops) && end-start < maxOps {
		size := ops[end].pb.SizeVT()
		if end > start && bytes+size > maxBytes {
			break
		}
		bytes += size
		end++
	}
	return end
}
