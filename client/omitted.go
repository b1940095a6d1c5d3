package client

import (
	"context"

	"github.com/l4xg/grid/api/gridpb"
)

// fillResult fetches the stored result the grid left out of r, the answer
// to the single operation op. Automatic batching sent op in a Batch RPC,
// and the grid's budget of stored results per Batch response (4 MiB, in
// request order) was spent by the operations before it; a single call
// never asked to share that budget. fillResult reads the key with a Get of
// its own, a unary RPC that no budget applies to, and takes its result
// when the record is still the one r describes (same state, attempt and
// completion time). Otherwise, or when that Get fails, r stays as it is,
// ResultOmitted set.
func (c *Client) fillResult(ctx context.Context, op Op, r *Result) {
	get := getOf(op.pb)
	if get == nil {
		return
	}
	s := c.exec(context.WithValue(ctx, unbatchedKey{}, true), []Op{{pb: get}}, true).st[0]
	if s.err != nil {
		return
	}
	g := s.result
	if g.ResultOmitted || g.State != r.State || g.Attempt != r.Attempt || !g.CompletedAt.Equal(r.CompletedAt) {
		return
	}
	r.Result, r.ResultOmitted = g.Result, false
}

// getOf is a Get of the key op names (op itself when it is a Get), nil for
// an empty operation.
func getOf(op *gridpb.Op) *gridpb.Op {
	if op.GetGet() != nil {
		return op
	}
	k := op.Request()
	if k == nil {
		return nil
	}
	get := &gridpb.GetRequest{Namespace: k.GetNamespace(), Key: k.GetKey(), Entity: k.GetEntity()}
	return &gridpb.Op{Op: &gridpb.Op_Get{Get: get}}
}

// unbatchedKey marks the context of an operation that goes as its own RPC,
// never through a node's batcher (see sendTo).
type unbatchedKey struct{}

func unbatched(ctx context.Context) bool {
	v, _ := ctx.Value(unbatchedKey{}).(bool)
	return v
}
