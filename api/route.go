package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/shard"
)

// Routing in a cluster (docs/design.md section 5).
//
// A standalone node holds every shard and serves every operation itself:
// none of this applies to it but the settles' two steps (router.place).
//
// A cluster node routes each operation by the cluster map it holds: the
// operation's shard is map.ShardOfSlot(digest.Slot(map.Slots)), the same
// function as shard.Host.SlotShard and as the client's, but for a settle,
// whose shard is first the one its token names (router.place). If this
// node holds a replica of the shard, the operation is proposed to it. If
// it holds none, or its replica answers shard.ErrNotLeader, the operation
// goes to the shard's leader: the one the local replica knows, else the map's
// leader hint, else the map's preferred leader (ShardReplicas[s][0]), at
// the gRPC address the map lists for it.
//
// Whether it is forwarded there or refused with a Redirect depends on the
// request: a request carrying "grid-redirect: 1" (a smart client routing
// by the map) or "grid-forwarded: 1" (already forwarded once) is never
// forwarded; neither is one whose leader is unknown, is this node, or has
// no address. Those get UNAVAILABLE with a Redirect{shard, leader_id,
// leader_addr, epoch}: in OpResult.error inside a Batch, as a status
// detail for a unary RPC. Otherwise the node forwards one Batch RPC per
// leader node carrying that node's operations in batch order (a unary RPC
// is a batch of one, a stream frame's shard parts are batches too), each
// marked "grid-forwarded: 1" so that a
// stale map on either side cannot make a request bounce between nodes; the
// leader's answers are returned as they are.
//
// The second step of a settle (its token's shard held no record of its
// key) is taken by the node that ran the first: on its own replica of the
// key's shard, or forwarded to that shard's leader even when the request
// asked for Redirects or was forwarded already, marked "grid-forwarded: 1"
// and "grid-by-key: 1" (routed by the key; its receiver never forwards it
// again). A client sent a Redirect instead would resend the settle by its
// token, to the first step again.
//
// A node that cannot serve at all refuses every operation with a Redirect
// naming no leader, with a reason: "starting" when it has no map yet (it is
// starting, or restarting and has not caught up), "removed" when its map
// says the cluster removed it (it must not serve). A node holding no
// replica of the shard that does not forward says "not a member" beside
// the leader it knows. Each of these, like every Redirect, proves that
// nothing was applied (gridpb.Reason*).
//
// Why resending is safe in one case and not in the other:
//
//   - shard.ErrNotLeader means the replica refused the proposal before it
//     reached the log (a follower, no leader, a new leader before its first
//     entry), so nothing was applied and the operation may go to another
//     node. The same holds for a shard not hosted here. A Redirect always
//     means "not applied: resending is safe".
//   - shard.ErrOutcomeUnknown means the proposal reached the log and its
//     fate is unknown: it stays UNAVAILABLE without a Redirect, so the
//     client treats it as an unknown outcome.
//   - A forwarded call that never had a connection (the peer refused the
//     dial, or is down) reached nothing: it is refused with the Redirect it
//     would have had without forwarding. One that fails on its way (a
//     connection reset, the peer crashing mid-call) may have been applied
//     by the peer, so it is UNAVAILABLE without a Redirect
//     (errForwardUnknown). A peer's
//     own answers pass through untouched, its Redirects included: the peer
//     said the operation was not applied.
const (
	// MetadataRedirect is the request header asking a node to answer with
	// Redirects instead of forwarding ("1").
	MetadataRedirect = "grid-redirect"
	// MetadataForwarded marks a request one node forwarded to another
	// ("1"); it is never forwarded again.
	MetadataForwarded = "grid-forwarded"
	// MetadataByKey marks the second step of a settle ("1", see
	// router.place): the node that ran the first step sends it to the
	// key's own shard, and it is routed by the key, not by the token.
	MetadataByKey = "grid-by-key"
)

// router routes the operations of one request by one view of the map.
type router struct {
	s       *Server
	m       *topology.Map // nil on a standalone node
	self    topology.NodeID
	forward bool // the request may be forwarded
	byKey   bool // settles go by their key, not their token (MetadataByKey)
}

// router returns the routing of a request; a cluster node without a map
// cannot route anything (errStarting).
func (s *Server) router(ctx context.Context) (*router, error) {
	r := &router{s: s, byKey: headerSet(ctx, MetadataByKey)}
	if s.opts.Cluster == nil {
		return r, nil
	}
	r.self = s.opts.Cluster.Self()
	if r.m = s.opts.Cluster.Map(); r.m == nil {
		return nil, errStarting
	}
	r.forward = !headerSet(ctx, MetadataRedirect) && !headerSet(ctx, MetadataForwarded)
	return r, nil
}

// opRouter is the router of an operation RPC (Batch and the unary ones).
// A node that cannot serve any operation refuses with a Redirect naming no
// leader, so that the client asks another node: reason "starting" without
// a map, "removed" when the map says the cluster removed it (it must not
// serve).
func (s *Server) opRouter(ctx context.Context) (*router, error) {
	r, err := s.router(ctx)
	if errors.Is(err, errStarting) {
		return nil, nodeRefusal(gridpb.ReasonStarting, 0, err)
	}
	if err != nil || r.m == nil {
		return r, err
	}
	if info, ok := r.m.Nodes[r.self]; ok && info.State == topology.NodeRemoved {
		return nil, nodeRefusal(gridpb.ReasonRemoved, r.m.Epoch, errRemoved)
	}
	return r, nil
}

// nodeRefusal is the refusal of every operation by a node that cannot
// serve now (reason starting or removed): a Redirect naming no leader, so
// that the client asks another node.
func nodeRefusal(reason string, epoch uint64, cause error) error {
	return &redirectError{to: &gridpb.Redirect{Epoch: epoch, Reason: reason}, cause: cause}
}

// headerSet reports whether the request carries header key with value "1".
func headerSet(ctx context.Context, key string) bool {
	// ValueFromIncomingContext copies key's values only, not every header:
	// this runs for every request and stream frame.
	for _, v := range metadata.ValueFromIncomingContext(ctx, key) {
		if v == "1" {
			return true
		}
	}
	return false
}

// forwardedContext marks an outgoing call as forwarded, with its caller's
// bearer token; it keeps ctx's deadline and cancellation.
func forwardedContext(ctx context.Context) context.Context {
	return forwardAuth(ctx, metadata.AppendToOutgoingContext(ctx, MetadataForwarded, "1"))
}

// forwardContext is ctx for a call this router forwards: marked forwarded,
// and by key when its settles go by their key.
func (r *router) forwardContext(ctx context.Context) context.Context {
	if r.byKey {
		return forwardAuth(ctx, metadata.AppendToOutgoingContext(ctx, MetadataForwarded, "1", MetadataByKey, "1"))
	}
	return forwardedContext(ctx)
}

// keyStep is the router of a settle's second step (see place): its
// settles go by their key, and it forwards what this node cannot serve
// whatever the request asked (the receiver, marked forwarded, never
// forwards it again), since a client resending the settle would send it
// by its token to the first step again.
func (r *router) keyStep() *router {
	k := *r
	k.byKey, k.forward = true, true
	return &k
}

// shardOf returns the shard of d and this node's replica of it (nil when
// it holds none).
func (r *router) shardOf(d digest.Digest) (int, *shard.Replica) {
	if r.m == nil {
		id := r.s.host.ShardOf(d)
		return id, r.s.host.Replica(id)
	}
	id := r.m.ShardOf(d)
	return id, r.replica(id)
}

// replica is this node's replica of shard id, nil when it holds none.
func (r *router) replica(id int) *shard.Replica {
	set := r.s.host.Settings()
	if r.m != nil && (r.m.Slots != set.Slots || r.m.Shards != set.Shards) {
		// This node's data directory was made with other hard settings:
		// its replica numbered id would own other slots. It serves nothing
		// (the cluster runtime refuses to start its replicas, too).
		return nil
	}
	return r.s.host.Replica(id)
}

// shards is the grid's shard count, by the map in a cluster.
func (r *router) shards() int {
	if r.m == nil {
		return r.s.host.Settings().Shards
	}
	return r.m.Shards
}

// place returns the shard operation t goes to and this node's replica of
// it (nil when it holds none), and for a settle the shard of its second
// step, or -1.
//
// Every operation goes to its record digest's shard, but a settle
// (Complete, Fail, Release, Extend), which goes first to the shard its
// token names (digest.TokenShard): the shard that granted the lease,
// which holds the key's record whatever entity placed it there, so a
// settle need not name the entity. When that shard is not the digest's and
// holds no record of the key (keyspace.Result.Found: nothing was applied
// there), the token was not granted to this key there (another key's,
// made up, or from before tokens named their shard), and the settle's
// second step runs on the digest's shard, as every settle did before
// tokens named their shard. A token naming no shard of the grid goes to
// the digest's shard at once. Either way the answer is that of the key's
// record, wherever it lives.
func (r *router) place(t target) (id int, sh *shard.Replica, second int) {
	id, sh = r.shardOf(t.cmd.Digest)
	if r.byKey || !settles(t.cmd.Op) {
		return id, sh, -1
	}
	granted, ok := digest.TokenShard(t.cmd.Token, r.shards())
	if !ok || granted == id {
		return id, sh, -1
	}
	return granted, r.replica(granted), id
}

// settles reports the operations that settle a lease by its token.
func settles(op keyspace.Op) bool {
	switch op {
	case keyspace.OpComplete, keyspace.OpFail, keyspace.OpRelease, keyspace.OpExtend:
		return true
	}
	return false
}

// leaderOf is the leader of shard id as this node knows it: its replica's
// view, else the map's hint, else the preferred leader; "" when none.
func (r *router) leaderOf(id int, local *shard.Replica) topology.NodeID {
	if local != nil {
		if l, _ := local.Leader(); l != "" {
			return topology.NodeID(l)
		}
	}
	if id < len(r.m.Leaders) && r.m.Leaders[id] != "" {
		return r.m.Leaders[id]
	}
	if id < len(r.m.ShardReplicas) && len(r.m.ShardReplicas[id]) > 0 {
		return r.m.ShardReplicas[id][0]
	}
	return ""
}

// peer is a node operations are forwarded to.
type peer struct {
	id   topology.NodeID
	addr string
}

// elsewhere decides where operations on shard id go that this node cannot
// serve (cause: errNotHosted or shard.ErrNotLeader). to.addr is set when
// they may be forwarded there; refusal is the answer otherwise, and also
// when forwarding turns out impossible: a Redirect, or on a standalone
// node the cause itself.
func (r *router) elsewhere(id int, local *shard.Replica, cause error) (to peer, refusal error) {
	if r.m == nil {
		return peer{}, cause
	}
	leader := r.leaderOf(id, local)
	addr := r.m.Nodes[leader].GRPCAddr
	rd := &gridpb.Redirect{Shard: uint32(id), LeaderId: string(leader), LeaderAddr: addr, Epoch: r.m.Epoch}
	if errors.Is(cause, errNotHosted) {
		rd.Reason = gridpb.ReasonNotMember
	}
	refusal = &redirectError{to: rd, cause: cause}
	if r.forward && leader != "" && leader != r.self && addr != "" {
		to = peer{id: leader, addr: addr}
	}
	return to, refusal
}

// forwardError is the answer to a forwarded call that failed. The peer's
// refusal with a Redirect, and any code but UNAVAILABLE (a deadline, a
// cancellation), pass through as the peer or gRPC gave them. UNAVAILABLE
// without a Redirect is a transport failure or the peer's own unknown
// outcome: the peer may have applied the call, so it becomes
// errForwardUnknown, never a Redirect.
func forwardError(err error, to peer) error {
	if redirectOf(err) != nil || status.Code(err) != codes.Unavailable {
		return err
	}
	return fmt.Errorf("%w: forwarded to %s at %s: %s", errForwardUnknown, to.id, to.addr, status.Convert(err).Message())
}

// serveOne runs the operation of a unary call as a batch of one (runBatch:
// planned, proposed here, forwarded to its shard's leader as a Batch or
// refused with a Redirect, a settle's second step included) and answers it
// as the unary RPC does: the result, or its error as a status, a Redirect
// as the status's detail.
func (s *Server) serveOne(ctx context.Context, op *gridpb.Op) (*gridpb.OpResult, error) {
	r, err := s.opRouter(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := make([]*gridpb.OpResult, 1)
	s.runBatch(ctx, r, []*gridpb.Op{op}, out)
	e := out[0].GetError()
	if e == nil {
		return out[0], nil
	}
	st := status.New(codes.Code(e.GetCode()), e.GetMessage())
	if rd := e.GetRedirect(); rd != nil {
		if d, err := st.WithDetails(rd); err == nil {
			st = d
		}
	}
	return nil, st.Err()
}
