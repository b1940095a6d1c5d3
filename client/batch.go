package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/protobuf/proto"
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
	b := &batchRun{
		c:       c,
		ops:     ops,
		results: make([]Result, len(ops)),
		errs:    make([]error, len(ops)),
		keys:    make([]routeKey, len(ops)),
		sends:   make([]int, len(ops)),
		noReply: make([]bool, len(ops)),
		next:    make([]string, len(ops)),
		unknown: make([]int, len(ops)),
	}
	pending := make([]int, len(ops))
	for i, op := range ops {
		if err := op.err; err != nil || op.pb.GetOp() == nil {
			if err == nil {
				err = fmt.Errorf("%w: operation %d is empty", ErrInvalidArgument, i)
			} else {
				err = fmt.Errorf("operation %d: %w", i, err)
			}
			for j := range b.errs {
				b.errs[j] = err
			}
			return b.results, b.errs, err
		}
		b.keys[i].op = op.pb
		pending[i] = i
	}
	b.start = c.cfg.clock()
	p := c.cfg.retry
	first := time.Now()
	for attempt := 1; len(pending) > 0; attempt++ {
		retry := b.round(ctx, pending)
		if len(retry) == 0 {
			break
		}
		ceiling, ok := p.again(attempt, time.Since(first))
		if !ok {
			break
		}
		if c.pause(ctx, jitter(ceiling)) != nil {
			stopped := b.stopped(ctx)
			for _, i := range retry {
				if b.noReply[i] {
					b.errs[i] = fmt.Errorf("%w (last error: %w)", stopped, b.errs[i])
				}
			}
			break
		}
		pending = retry
	}
	return b.results, b.errs, b.finish()
}

// batchRun is one call of Batch: its operations, their answers so far, and
// what is known of each one's fate. The sends of different nodes run in
// parallel; each touches the elements of its own operations only.
type batchRun struct {
	c       *Client
	ops     []Op
	results []Result
	errs    []error
	keys    []routeKey
	start   time.Time // the client's clock before the first send
	sends   []int     // sends of the operation a node may have applied
	noReply []bool    // errs[i] is not an answer: an RPC failed, or it was not sent
	next    []string  // the leader a Redirect named, for the next hop
	unknown []int     // Redirects that named no leader
}

// verdict is what became of one operation in one RPC.
type verdict uint8

const (
	settled    verdict = iota // answered, or refused for good
	redirected                // refused with a Redirect: send it to the leader now
	retryLater                // unavailable: send it again after a backoff
)

// groupOut lists the operations of one node's part that need another send.
type groupOut struct {
	redirected, retry []int
}

// round sends the operations idx once, each to its shard's leader,
// following Redirects up to maxRedirects, and returns those to send again
// after a backoff, in order.
func (b *batchRun) round(ctx context.Context, idx []int) []int {
	var retry []int
	for hop := 0; len(idx) > 0; hop++ {
		addrs, groups, err := b.group(ctx, idx)
		if err != nil {
			for _, i := range idx {
				b.noAnswer(i, err)
			}
			break
		}
		outs := make([]groupOut, len(addrs))
		if len(addrs) == 1 {
			outs[0] = b.sendGroup(ctx, addrs[0], groups[0])
		} else {
			var wg sync.WaitGroup
			for g := range addrs {
				wg.Go(func() { outs[g] = b.sendGroup(ctx, addrs[g], groups[g]) })
			}
			wg.Wait()
		}
		idx = idx[:0:0]
		for _, o := range outs {
			idx = append(idx, o.redirected...)
			retry = append(retry, o.retry...)
		}
		slices.Sort(idx)
		if len(idx) > 0 && hop == maxRedirects {
			for _, i := range idx {
				b.errs[i] = tooManyRedirects(b.errs[i])
			}
			retry = append(retry, idx...)
			break
		}
		if err := b.waitForLeaders(ctx, idx); err != nil {
			for _, i := range idx {
				b.noAnswer(i, err)
			}
			break
		}
	}
	slices.Sort(retry)
	return retry
}

// waitForLeaders pauses before the next hop when a Redirect named no leader.
func (b *batchRun) waitForLeaders(ctx context.Context, idx []int) error {
	n := 0
	for _, i := range idx {
		if b.next[i] == "" {
			n = max(n, b.unknown[i])
		}
	}
	if n == 0 {
		return nil
	}
	if b.c.pause(ctx, b.c.leaderWait(n)) != nil {
		return b.stopped(ctx)
	}
	return nil
}

// group splits the operations idx by the node to send them to, keeping
// their order within each node.
func (b *batchRun) group(ctx context.Context, idx []int) (addrs []string, groups [][]int, err error) {
	at := map[string]int{}
	for _, i := range idx {
		addr := b.next[i]
		b.next[i] = ""
		if addr == "" {
			if addr, err = b.c.r.target(ctx, &b.keys[i], b.unknown[i]); err != nil {
				return nil, nil, err
			}
		}
		g, ok := at[addr]
		if !ok {
			g = len(addrs)
			at[addr] = g
			addrs = append(addrs, addr)
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return addrs, groups, nil
}

// sendGroup sends the operations idx to the node at addr, in RPCs of at
// most the max batch size, one after the other.
func (b *batchRun) sendGroup(ctx context.Context, addr string, idx []int) (out groupOut) {
	n, err := b.c.nodes.get(addr)
	if err != nil {
		err = nodeErr(addr, err)
		for _, i := range idx {
			b.noAnswer(i, err)
		}
		return out
	}
	ops := make([]Op, len(idx))
	for j, i := range idx {
		ops[j] = b.ops[i]
	}
	for start := 0; start < len(idx); {
		if ctx.Err() != nil || b.c.root.Err() != nil {
			err := b.stopped(ctx)
			for _, i := range idx[start:] {
				b.noAnswer(i, err)
			}
			return out
		}
		end := chunkEnd(ops, start, b.c.cfg.maxBatch, maxBatchBytes)
		chunk := make([]*gridpb.Op, end-start)
		for j := range chunk {
			chunk[j] = ops[start+j].pb
		}
		resp, err := b.c.batchOnce(ctx, n, chunk)
		if err != nil && redirectOf(err) == nil {
			// The RPC failed as a whole: its operations may have been
			// applied (unless it never left), and those behind it wait
			// for the next round.
			left := !neverSent(err)
			if ctx.Err() != nil {
				err = ctxDone(ctx)
			}
			if errors.Is(err, ErrUnavailable) {
				b.c.r.unreachable(addr)
			}
			if left {
				for _, i := range idx[start:end] {
					b.sends[i]++
				}
			}
			for _, i := range idx[start:] {
				b.noAnswer(i, err)
			}
			if retryable(err) {
				out.retry = append(out.retry, idx[start:]...)
			}
			return out
		}
		refused := false
		for j, i := range idx[start:end] {
			var res *gridpb.OpResult
			opErr := err // a Redirect for the whole RPC
			if err == nil {
				if res = resp.Results[j]; res.GetError() != nil {
					res, opErr = nil, fromOpError(res.GetError())
				}
			}
			switch b.settle(i, addr, res, opErr) {
			case redirected:
				out.redirected = append(out.redirected, i)
			case retryLater:
				out.retry = append(out.retry, i)
				refused = true
			}
		}
		if refused {
			b.c.r.unreachable(addr) // as send does for one operation
		}
		start = end
	}
	return out
}

// settle records the answer of the node at from to operation i.
func (b *batchRun) settle(i int, from string, res *gridpb.OpResult, err error) verdict {
	if rd := redirectOf(err); rd != nil {
		b.errs[i], b.noReply[i], b.next[i] = err, false, b.c.r.redirected(from, rd)
		if b.next[i] == "" {
			b.unknown[i]++
		}
		return redirected
	}
	b.sends[i]++
	b.noReply[i] = false
	if err != nil {
		b.results[i], b.errs[i] = Result{}, err
		if retryable(err) {
			return retryLater
		}
		return settled
	}
	b.results[i] = b.ops[i].result(res, b.start, b.sends[i])
	b.errs[i] = b.ops[i].outcomeErr(b.results[i])
	return settled
}

// noAnswer records that operation i got no answer this time.
func (b *batchRun) noAnswer(i int, err error) {
	b.results[i], b.errs[i], b.noReply[i] = Result{}, err, true
}

// stopped is why the run stops early: ctx ended, or the client closed.
func (b *batchRun) stopped(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctxDone(ctx)
	}
	return ErrClosed
}

// finish labels the operations left without an answer, sent (outcome
// unknown) or not, and returns the error of the first of them. An operation
// whose last answer was a refusal as unavailable, after a send that may have
// been applied, is labelled outcome unknown too. Each Result without an
// answer still says how many sends may have been applied.
func (b *batchRun) finish() error {
	var first error
	for i, err := range b.errs {
		sent := b.sends[i] > 0
		switch {
		case b.noReply[i]:
			if first == nil {
				first = err
			}
			if sent {
				b.errs[i] = fmt.Errorf("client: outcome unknown: %w", err)
			} else {
				b.errs[i] = fmt.Errorf("client: not sent: %w", err)
			}
		case err != nil && sent && retryable(err):
			b.errs[i] = fmt.Errorf("client: outcome unknown: %w", err)
		}
		b.results[i].Sends = b.sends[i]
	}
	return first
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
