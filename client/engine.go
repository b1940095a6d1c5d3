package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The engine is the one way every operation goes, Batch's and a single
// call's alike (a single call is a batch of one, as CockroachDB's kv.DB
// does it): route each operation to its shard's leader, send each node its
// part, follow the Redirects at once, send again under the retry policy
// what was refused as unavailable, and label what ends without an answer
// by one rule (ending). What differs is only the carrier of a send: a
// single call rides its node's batcher (a stream frame or a Batch RPC
// shared with other calls) or a unary RPC; a Batch sends its own Batch
// RPCs, at most the max batch size each.

// opRun is one call of operations through the engine. The sends of
// different nodes run in parallel; each touches the state of its own
// operations only.
type opRun struct {
	c      *Client
	ops    []Op
	single bool      // a single call: its one operation rides the node's carrier
	start  time.Time // the client's clock before the first send
	st     []opState
	first  error // the first error of an operation left without an answer (Batch's error)

	// A single call's run holds its operation's state, index and group
	// here, so that the common call allocates little more than the run.
	one      [1]opState
	oneIdx   [1]int
	oneAddr  [1]string
	oneGroup [1][]int
	oneOut   [1]groupOut
}

// opState is what is known of one operation's fate so far.
type opState struct {
	key     routeKey
	result  Result
	err     error
	sends   int    // sends a node may have applied
	noReply bool   // err is no answer: an RPC failed, or it was not sent
	next    string // the leader a Redirect named, for the next hop
	unknown int    // Redirects that named no leader
}

// verdict is what became of one operation in one send.
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

// exec sends ops, each checked by its caller (not empty, no option error),
// and returns their fate: every operation answered, refused, or labelled
// by ending. single sends the one operation of a single call through its
// node's carrier.
func (c *Client) exec(ctx context.Context, ops []Op, single bool) *opRun {
	r := &opRun{c: c, ops: ops, single: single, start: c.cfg.clock()}
	var pending []int
	if len(ops) == 1 {
		r.st, pending = r.one[:], r.oneIdx[:]
	} else {
		r.st, pending = make([]opState, len(ops)), make([]int, len(ops))
	}
	for i, op := range ops {
		r.st[i].key.op = op.pb
		pending[i] = i
	}
	p := c.cfg.retry
	first := time.Now()
	for attempt := 1; len(pending) > 0; attempt++ {
		retry := r.round(ctx, pending)
		if len(retry) == 0 {
			break
		}
		ceiling, ok := p.again(attempt, time.Since(first))
		if !ok {
			break
		}
		if c.pause(ctx, jitter(ceiling)) != nil {
			stopped := r.stopped(ctx)
			for _, i := range retry {
				s := &r.st[i]
				s.err, s.noReply = fmt.Errorf("%w (last error: %w)", stopped, s.err), true
			}
			break
		}
		pending = retry
	}
	r.first = r.finish()
	return r
}

// round sends the operations idx once, each to its shard's leader,
// following Redirects up to maxRedirects, and returns those to send again
// after a backoff, in order.
func (r *opRun) round(ctx context.Context, idx []int) []int {
	var retry []int
	for hop := 0; len(idx) > 0; hop++ {
		addrs, groups, err := r.group(ctx, idx)
		if err != nil {
			for _, i := range idx {
				r.noAnswer(i, err)
			}
			break
		}
		var outs []groupOut
		if len(addrs) == 1 {
			outs = r.oneOut[:]
			outs[0] = r.sendGroup(ctx, addrs[0], groups[0])
		} else {
			outs = make([]groupOut, len(addrs))
			var wg sync.WaitGroup
			for g := range addrs {
				wg.Go(func() { outs[g] = r.sendGroup(ctx, addrs[g], groups[g]) })
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
				r.st[i].err = tooManyRedirects(r.st[i].err)
			}
			retry = append(retry, idx...)
			break
		}
		if err := r.waitForLeaders(ctx, idx); err != nil {
			for _, i := range idx {
				r.noAnswer(i, err)
			}
			break
		}
	}
	slices.Sort(retry)
	return retry
}

// waitForLeaders pauses before the next hop when a Redirect named no leader.
func (r *opRun) waitForLeaders(ctx context.Context, idx []int) error {
	n := 0
	for _, i := range idx {
		if r.st[i].next == "" {
			n = max(n, r.st[i].unknown)
		}
	}
	if n == 0 {
		return nil
	}
	if r.c.pause(ctx, r.c.leaderWait(n)) != nil {
		return r.stopped(ctx)
	}
	return nil
}

// group splits the operations idx by the node to send them to, keeping
// their order within each node. Nodes are few: a linear search finds an
// operation's group.
func (r *opRun) group(ctx context.Context, idx []int) (addrs []string, groups [][]int, err error) {
	if len(idx) == 1 {
		addrs, groups = r.oneAddr[:0], r.oneGroup[:0]
	}
	for _, i := range idx {
		s := &r.st[i]
		addr := s.next
		s.next = ""
		if addr == "" {
			if addr, err = r.c.r.target(ctx, &s.key, s.unknown); err != nil {
				return nil, nil, err
			}
		}
		g := slices.Index(addrs, addr)
		if g < 0 {
			g = len(addrs)
			addrs = append(addrs, addr)
			groups = append(groups, nil)
		}
		if len(idx) == 1 {
			groups[g] = idx // one operation: its group is idx itself
			break
		}
		groups[g] = append(groups[g], i)
	}
	return addrs, groups, nil
}

// sendGroup sends the operations idx to the node at addr: a single call's
// through the node's carrier, a Batch's in RPCs of at most the max batch
// size, one after the other.
func (r *opRun) sendGroup(ctx context.Context, addr string, idx []int) groupOut {
	n, err := r.c.nodes.get(addr)
	if err != nil {
		err = nodeErr(addr, err)
		for _, i := range idx {
			r.noAnswer(i, err)
		}
		return groupOut{}
	}
	if r.single {
		return r.sendOne(ctx, addr, n, idx)
	}
	return r.sendChunks(ctx, addr, n, idx)
}

// sendOne sends the single call's operation, idx[0], to n through its
// carrier.
func (r *opRun) sendOne(ctx context.Context, addr string, n *node, idx []int) (out groupOut) {
	i := idx[0]
	res, err := r.c.sendOnce(ctx, n, r.ops[i].pb)
	if err != nil && redirectOf(err) == nil && !refusal(err) {
		out.retry = r.broke(ctx, addr, idx, idx, err)
		return out
	}
	switch r.settle(i, addr, res, err) {
	case redirected:
		out.redirected = idx
	case retryLater:
		out.retry = idx
		r.c.r.unreachable(addr)
	}
	return out
}

// sendChunks sends the operations idx to n in Batch RPCs, one after the
// other. An RPC that fails as a whole without an answer holds back the
// operations behind it until the next round.
func (r *opRun) sendChunks(ctx context.Context, addr string, n *node, idx []int) (out groupOut) {
	ops := make([]Op, len(idx))
	for j, i := range idx {
		ops[j] = r.ops[i]
	}
	for start := 0; start < len(idx); {
		if ctx.Err() != nil || r.c.root.Err() != nil {
			err := r.stopped(ctx)
			for _, i := range idx[start:] {
				r.noAnswer(i, err)
			}
			return out
		}
		end := chunkEnd(ops, start, r.c.cfg.maxBatch, maxBatchBytes)
		chunk := make([]*gridpb.Op, end-start)
		for j := range chunk {
			chunk[j] = ops[start+j].pb
		}
		resp, err := r.c.batchOnce(ctx, n, chunk)
		if err != nil && redirectOf(err) == nil && !refusal(err) {
			out.retry = append(out.retry, r.broke(ctx, addr, idx[start:end], idx[start:], err)...)
			return out
		}
		retries := len(out.retry)
		for j, i := range idx[start:end] {
			var res *gridpb.OpResult
			opErr := err // the grid's answer to the whole RPC
			if err == nil {
				if res = resp.Results[j]; res.GetError() != nil {
					res, opErr = nil, fromOpError(res.GetError())
				}
			}
			r.answer(i, addr, res, opErr, &out)
		}
		if len(out.retry) > retries {
			r.c.r.unreachable(addr)
		}
		start = end
	}
	return out
}

// answer records the answer of the node at from to operation i and adds it
// to out when it needs another send.
func (r *opRun) answer(i int, from string, res *gridpb.OpResult, err error, out *groupOut) {
	switch r.settle(i, from, res, err) {
	case redirected:
		out.redirected = append(out.redirected, i)
	case retryLater:
		out.retry = append(out.retry, i)
	}
}

// broke records a send that failed as a whole with err, no answer of the
// grid: the operations sent in it may have been applied (unless it never
// left), and those held (sent and behind it) got no answer. It returns the
// ones to send again after a backoff.
func (r *opRun) broke(ctx context.Context, addr string, sent, held []int, err error) []int {
	left := !neverSent(err)
	if ctx.Err() != nil {
		err = ctxDone(ctx)
	}
	if errors.Is(err, ErrUnavailable) {
		r.c.r.unreachable(addr)
	}
	if left {
		for _, i := range sent {
			r.st[i].sends++
		}
	}
	for _, i := range held {
		r.noAnswer(i, err)
	}
	if retryable(err) {
		return held
	}
	return nil
}

// settle records the answer of the node at from to operation i.
func (r *opRun) settle(i int, from string, res *gridpb.OpResult, err error) verdict {
	s := &r.st[i]
	if rd := redirectOf(err); rd != nil {
		s.err, s.noReply, s.next = err, false, r.c.r.redirected(from, rd)
		if s.next == "" {
			s.unknown++
		}
		return redirected
	}
	s.sends++
	s.noReply = false
	if err != nil {
		s.result, s.err = Result{}, err
		if retryable(err) {
			return retryLater
		}
		return settled
	}
	s.result = r.ops[i].result(res, r.start, s.sends)
	s.err = r.ops[i].outcomeErr(s.result)
	return settled
}

// noAnswer records that operation i got no answer this time.
func (r *opRun) noAnswer(i int, err error) {
	s := &r.st[i]
	s.result, s.err, s.noReply = Result{}, err, true
}

// stopped is why the run stops early: ctx ended, or the client closed.
func (r *opRun) stopped(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctxDone(ctx)
	}
	return ErrClosed
}

// finish labels every operation's error by ending, sets each Result's
// Sends, and returns the first error of an operation left without an
// answer, before its label.
func (r *opRun) finish() (first error) {
	for i := range r.st {
		s := &r.st[i]
		if s.noReply && first == nil {
			first = s.err
		}
		s.err = ending(s.err, s.sends > 0, !s.noReply)
		s.result.Sends = s.sends
	}
	return first
}

// ending is the one rule of outcomes, for every operation and every call
// the client retries: an error that ends a call is labelled outcome
// unknown when a send may have been applied (sent) and no answer proved
// what became of it (no answer at all, or an answer of unavailable, which
// says nothing of the send before it), and not sent when nothing left the
// client. A refusal of the grid (answered) stands as it came.
func ending(err error, sent, answered bool) error {
	switch {
	case err == nil:
		return nil
	case sent && (!answered || retryable(err)):
		return unknownIf(true, err)
	case !sent && !answered && !errors.Is(err, errUnknown):
		return fmt.Errorf("%w: %w", errNotSent, err)
	}
	return err
}

// refusal reports an error that is the grid's answer to the whole request:
// it refused it before running any of it (the input, a limit, the caller's
// credentials, the node's state), so nothing was applied. Unavailable,
// internal errors and ended contexts are no answer.
func refusal(err error) bool {
	var re *rpcError
	if !errors.As(err, &re) || neverSent(err) {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.ResourceExhausted, codes.PermissionDenied,
		codes.Unauthenticated, codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists, codes.Unimplemented:
		return true
	}
	return false
}
