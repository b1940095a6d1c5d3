package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"
	grpcpeer "google.golang.org/grpc/peer"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/shard"
)

// group is the operations of one batch on one shard, in batch order.
type group struct {
	shard  int
	sh     *shard.Replica // the local replica; nil when not hosted here
	cmds   []keyspace.Command
	idx    []int  // positions in the batch
	second []bool // per operation: a settle with a second step (router.place)
}

// withoutReserves answers g's Reserves with err (the disk guard's
// refusal: shard.Host.DiskRoom) and returns the group of its other
// operations, which go on.
func (g *group) withoutReserves(err error, out []*gridpb.OpResult) *group {
	kept := &group{shard: g.shard, sh: g.sh}
	for k, c := range g.cmds {
		if c.Op == keyspace.OpReserve {
			out[g.idx[k]] = errResult(err)
			continue
		}
		kept.cmds = append(kept.cmds, c)
		kept.idx = append(kept.idx, g.idx[k])
		kept.second = append(kept.second, g.second[k])
	}
	return kept
}

// away is operations of one shard this node could not serve (cause:
// errNotHosted or shard.ErrNotLeader). Nothing of them was applied.
type away struct {
	shard int
	sh    *shard.Replica
	cause error
	idx   []int
}

// runBatch answers ops into out (one result per operation, in order), in
// three steps: validate and group by shard; run the groups of local
// replicas, linearizable reads included, each as one proposal, in
// parallel, then the stale reads locally; send what is left to the
// shards' leaders (see route.go), one Batch RPC per leader node, or refuse
// it with Redirects. Forwarding waits for the local proposals so that each
// leader node receives a single RPC, also for groups its own replica
// refused here. Last, the settles that found no record of their key on
// their token's shard here take their second step (router.place).
func (s *Server) runBatch(ctx context.Context, r *router, ops []*gridpb.Op, out []*gridpb.OpResult) {
	s.runPlan(ctx, r, ops, s.plan(r, ops, out), out)
	boundResults(out)
}

// plan is a batch's operations validated, digested once and grouped by
// shard (router.plan): groups to propose, stale reads to answer locally,
// and each operation's target.
type plan struct {
	groups  []*group
	reads   []int
	targets []target
}

// runPlan runs p's groups and reads as runBatch does, and writes their
// answers into out, at their positions in ops only: the parts of one
// stream frame run side by side on the frame's plan.
func (s *Server) runPlan(ctx context.Context, r *router, ops []*gridpb.Op, p plan, out []*gridpb.OpResult) {
	groups, reads, targets := p.groups, p.reads, p.targets
	// refused[j] is set when group j's replica is not the leader; each
	// goroutine writes only its own element, and only the elements of
	// missed at its group's positions: the settles that found no record of
	// their key on their token's shard here.
	refused := make([]error, len(groups))
	missed := make([]bool, len(ops))
	propose := func(j int, g *group) {
		if err := s.host.DiskRoom(g.cmds); err != nil && g.sh.IsLeader() {
			g.sh.DiskRefused() // its leader hands over to a node with room
			g = g.withoutReserves(err, out)
			groups[j] = g
			if len(g.cmds) == 0 {
				return
			}
		}
		res, err := g.sh.Propose(ctx, g.cmds)
		if err != nil && r.m != nil && errors.Is(err, shard.ErrNotLeader) {
			refused[j] = err
			return
		}
		for k, i := range g.idx {
			if err != nil {
				out[i] = errResult(err)
			} else {
				out[i] = toProto(&res[k])
				missed[i] = g.second[k] && !res[k].Found
			}
		}
	}
	if len(groups) == 1 && groups[0].sh != nil {
		propose(0, groups[0]) // one shard (a stream's part): no hand-off
	} else {
		var wg sync.WaitGroup
		for j, g := range groups {
			if g.sh == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				propose(j, g)
			}()
		}
		wg.Wait()
	}
	var left []away
	for j, g := range groups {
		switch {
		case g.sh == nil:
			left = append(left, away{shard: g.shard, cause: errNotHosted, idx: g.idx})
		case refused[j] != nil:
			left = append(left, away{shard: g.shard, sh: g.sh, cause: refused[j], idx: g.idx})
		}
	}
	for _, i := range reads {
		t := targets[i]
		id, sh := r.shardOf(t.cmd.Digest)
		if sh == nil {
			left = append(left, away{shard: id, cause: errNotHosted, idx: []int{i}})
			continue
		}
		res, err := sh.Read(ctx, t.cmd.Digest, t.readOptions())
		if err != nil {
			out[i] = errResult(err)
		} else {
			out[i] = toProto(&res)
		}
	}
	s.sendAway(ctx, r, ops, left, out)
	s.secondStep(ctx, r, ops, missed, out)
}

// secondStep runs, as one more batch routed by key, the settles whose
// first step found no record of their key (router.place), and puts their
// answers in out. They run after the rest of the batch.
func (s *Server) secondStep(ctx context.Context, r *router, ops []*gridpb.Op, missed []bool, out []*gridpb.OpResult) {
	var idx []int
	for i, m := range missed {
		if m {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	sub := make([]*gridpb.Op, len(idx))
	for k, i := range idx {
		sub[k] = ops[i]
	}
	res := make([]*gridpb.OpResult, len(idx))
	s.runBatch(ctx, r.keyStep(), sub, res)
	for k, i := range idx {
		out[i] = res[k]
	}
}

// plan plans ops on r (router.plan) and counts them.
func (s *Server) plan(r *router, ops []*gridpb.Op, out []*gridpb.OpResult) plan {
	s.metrics.planned.Add(float64(len(ops)))
	return r.plan(ops, out)
}

// plan validates every operation and groups the others by shard, in batch
// order. An invalid operation gets its error in out. Stale reads are
// listed apart: they are answered locally, after the proposals.
func (r *router) plan(ops []*gridpb.Op, out []*gridpb.OpResult) plan {
	var groups []*group
	var reads []int
	byShard := make(map[int]*group)
	targets := make([]target, len(ops))
	for i, op := range ops {
		t, err := opTarget(op)
		if err != nil {
			out[i] = errResult(err)
			continue
		}
		targets[i] = t
		if t.read && t.staleOK {
			reads = append(reads, i)
			continue
		}
		if t.read {
			// A linearizable read is a read-only command in the shard's
			// proposal, so it sees exactly the batch's earlier writes.
			t.cmd.Op = keyspace.OpGet
		}
		id, sh, second := r.place(t)
		g := byShard[id]
		if g == nil {
			// Room for every operation left: a batch of one shard (the
			// client's batches are) then fills its group without growing
			// it, which cost more allocation than the rest of the plan.
			left := len(ops) - i
			g = &group{shard: id, sh: sh,
				cmds: make([]keyspace.Command, 0, left), idx: make([]int, 0, left), second: make([]bool, 0, left)}
			byShard[id] = g
			groups = append(groups, g)
		}
		g.cmds = append(g.cmds, t.cmd)
		g.idx = append(g.idx, i)
		g.second = append(g.second, second >= 0)
	}
	return plan{groups: groups, reads: reads, targets: targets}
}

// sendAway forwards the operations of left to their shards' leaders, one
// Batch RPC per leader node with its operations in batch order, or
// answers them with the refusal of their shard (a Redirect).
func (s *Server) sendAway(ctx context.Context, r *router, ops []*gridpb.Op, left []away, out []*gridpb.OpResult) {
	if len(left) == 0 {
		return
	}
	parcels := make(map[peer][]parcelItem)
	for _, a := range left {
		to, refusal := r.elsewhere(a.shard, a.sh, a.cause)
		if to.addr == "" {
			s.metrics.routed(routeRedirected, len(a.idx))
			for _, i := range a.idx {
				out[i] = errResult(refusal)
			}
			continue
		}
		for _, i := range a.idx {
			parcels[to] = append(parcels[to], parcelItem{i: i, refusal: refusal})
		}
	}
	var wg sync.WaitGroup
	fctx := r.forwardContext(ctx)
	for to, items := range parcels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slices.SortFunc(items, func(a, b parcelItem) int { return a.i - b.i })
			s.forwardBatch(fctx, to, ops, items, out)
		}()
	}
	wg.Wait()
}

// parcelItem is one operation forwarded in a batch: its position, and the
// answer it gets if it cannot be sent.
type parcelItem struct {
	i       int
	refusal error
}

// forwardBatch sends the operations of items (in batch order) to node to
// as one Batch RPC, with ctx marked as forwarded, and puts its answers in
// out. Operations that could not be sent (no connection to the node, a
// dial refused) get their refusal, a Redirect: nothing was applied; a call
// that failed on its way leaves their outcome unknown.
func (s *Server) forwardBatch(ctx context.Context, to peer, ops []*gridpb.Op, items []parcelItem, out []*gridpb.OpResult) {
	c, err := s.peers.client(to.addr)
	if err != nil {
		for _, it := range items {
			out[it.i] = errResult(it.refusal)
		}
		return
	}
	sub := &gridpb.BatchRequest{Ops: make([]*gridpb.Op, len(items))}
	for k, it := range items {
		sub.Ops[k] = ops[it.i]
	}
	s.metrics.routed(routeForwarded, len(items))
	var got grpcpeer.Peer
	resp, err := c.Batch(ctx, sub, grpc.Peer(&got))
	if err == nil && len(resp.GetResults()) != len(items) {
		err = fmt.Errorf("%w: %s at %s answered %d results for %d operations", errForwardUnknown, to.id, to.addr, len(resp.GetResults()), len(items))
	}
	for k, it := range items {
		switch {
		case err != nil && got.Addr == nil:
			// The call never had a connection (the leader's node refused
			// it, or is down): nothing reached it, so nothing was applied.
			out[it.i] = errResult(it.refusal)
		case err != nil:
			out[it.i] = errResult(forwardError(err, to))
		default:
			out[it.i] = resp.Results[k]
		}
	}
}

// maxBatchResponse bounds the encoded size of one BatchResponse: the
// request limit, which is also gRPC's default receive limit, so that any
// client can take the answer and a request cannot ask for a response
// thousands of times its size (1000 Reserves of one completed key would
// otherwise bring its 64 KiB result back 1000 times).
const maxBatchResponse = digest.MaxRequestBytes

// boundResults keeps the BatchResponse of out within maxBatchResponse by
// leaving out stored results, in request order: results are kept while
// the response with them, and with every other field of every result,
// fits; from the first one that does not fit, or that a peer already left
// out of its part of the batch, every later stored result is left out and
// its OpResult marked result_omitted. Nothing else of a result changes,
// and the records keep their results: a Get returns them. Which results
// are left out depends only on the results, so a resent batch that finds
// the same records gets the same answer; and a peer's own bound never
// leaves out a result this one would keep, as its part of the batch and
// the results before each of its operations are subsets of these.
func boundResults(out []*gridpb.OpResult) {
	stored := 0
	for _, r := range out {
		stored += len(r.GetResult())
	}
	if stored == 0 {
		return
	}
	// The rest of the response, as an upper bound: each result without
	// its stored bytes but with result_omitted set, its field tag and the
	// longest length prefix of a result carrying 64 KiB.
	rest := 0
	for _, r := range out {
		res := r.GetResult()
		if r != nil {
			r.Result = nil
		}
		rest += r.SizeVT() + omittedFieldBytes + 1 + 3
		if r != nil {
			r.Result = res
		}
	}
	left, spent := maxBatchResponse-rest, false
	for _, r := range out {
		n := len(r.GetResult())
		switch {
		case r.GetResultOmitted():
			spent = true
		case n == 0:
		case spent || n+resultFieldBytes > left:
			r.Result, r.ResultOmitted, spent = nil, true, true
		default:
			left -= n + resultFieldBytes
		}
	}
}

// The encoded cost of OpResult.result_omitted set (tag and value), and of
// OpResult.result beside its bytes (tag and a length of up to 64 KiB).
const (
	omittedFieldBytes = 2
	resultFieldBytes  = 1 + 3
)
