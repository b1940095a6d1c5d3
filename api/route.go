package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/shard"
)

// Routing in a cluster (DESIGN section 5).
//
// A standalone node holds every shard and serves every operation itself:
// none of this applies to it, and its answers are what they always were.
//
// A cluster node routes each operation by the cluster map it holds: the
// operation's shard is map.ShardOfSlot(digest.Slot(map.Slots)), the same
// function as shard.Host.SlotShard and as the client's, but for a settle,
// whose shard is the one its token names (router.place; on a standalone
// node too). If this node holds
// a replica of the shard, the operation is proposed to it. If it holds
// none, or its replica answers shard.ErrNotLeader, the operation goes to
// the shard's leader: the one the local replica knows, else the map's
// leader hint, else the map's preferred leader (ShardReplicas[s][0]), at
// the gRPC address the map lists for it.
//
// Whether it is forwarded there or refused with a Redirect depends on the
// request: a request carrying "grid-redirect: 1" (a smart client routing
// by the map) or "grid-forwarded: 1" (already forwarded once) is never
// forwarded; neither is one whose leader is unknown, is this node, or has
// no address. Those get UNAVAILABLE with a Redirect{shard, leader_id,
// leader_addr, epoch}: in OpResult.error inside a Batch, as a status
// detail for a unary RPC. Otherwise the node forwards: a unary RPC as the
// same RPC, a Batch as one Batch RPC per leader node carrying that node's
// operations in batch order, each marked "grid-forwarded: 1" so that a
// stale map on either side cannot make a request bounce between nodes; the
// leader's answers are returned as they are.
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
//   - A forwarded call that fails on its way (connection refused or reset,
//     the peer crashing mid-call) may have been applied by the peer, so it
//     too is UNAVAILABLE without a Redirect (errForwardUnknown). A peer's
//     own answers pass through untouched, its Redirects included: the peer
//     said the operation was not applied.
const (
	// MetadataRedirect is the request header asking a node to answer with
	// Redirects instead of forwarding ("1").
	MetadataRedirect = "grid-redirect"
	// MetadataForwarded marks a request one node forwarded to another
	// ("1"); it is never forwarded again.
	MetadataForwarded = "grid-forwarded"
)

// router routes the operations of one request by one view of the map.
type router struct {
	s       *Server
	m       *cluster.Map // nil on a standalone node
	self    cluster.NodeID
	forward bool // the request may be forwarded
}

// router returns the routing of a request; a cluster node without a map
// cannot route anything (errStarting).
func (s *Server) router(ctx context.Context) (*router, error) {
	r := &router{s: s}
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
	if info, ok := r.m.Nodes[r.self]; ok && info.State == cluster.NodeRemoved {
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
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(key) {
		if v == "1" {
			return true
		}
	}
	return false
}

// forwardedContext marks an outgoing call as forwarded; it keeps ctx's
// deadline and cancellation.
func forwardedContext(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, MetadataForwarded, "1")
}

// shardOf returns the shard of d and this node's replica of it (nil when
// it holds none).
func (r *router) shardOf(d keyspace.Digest) (int, *shard.Shard) {
	if r.m == nil {
		id := r.s.host.SlotShard(d.Slot(r.s.host.Settings().Slots))
		return id, r.s.host.Shard(id)
	}
	id := r.m.ShardOfSlot(d.Slot(r.m.Slots))
	return id, r.replica(id)
}

// replica is this node's replica of shard id, nil when it holds none.
func (r *router) replica(id int) *shard.Shard {
	set := r.s.host.Settings()
	if r.m != nil && (r.m.Slots != set.Slots || r.m.Shards != set.Shards) {
		// This node's data directory was made with other hard settings:
		// its replica numbered id would own other slots. It serves nothing
		// (the cluster runtime refuses to start its replicas, too).
		return nil
	}
	return r.s.host.Shard(id)
}

// shards is the grid's shard count, by the map in a cluster.
func (r *router) shards() int {
	if r.m == nil {
		return r.s.host.Settings().Shards
	}
	return r.m.Shards
}

// place returns the shard operation t goes to and this node's replica of
// it (nil when it holds none). Every operation goes to its digest's shard
// but a settle (Complete, Fail, Release, Extend), which goes to the shard
// its token names (keyspace.TokenShard): the shard that granted the lease
// holds the key's record whatever entity placed it, so a settle need not
// name the entity. A token that names no shard of this grid was not
// granted by it: the settle goes to its key's shard, which answers as it
// does for any token it did not grant. A settle that names an entity
// placing its key on another shard than its token's contradicts itself
// and is refused, naming both.
func (r *router) place(t target) (int, *shard.Shard, error) {
	id, sh := r.shardOf(t.cmd.Digest)
	switch t.cmd.Op {
	case keyspace.OpComplete, keyspace.OpFail, keyspace.OpRelease, keyspace.OpExtend:
	default:
		return id, sh, nil
	}
	granted, ok := keyspace.TokenShard(t.cmd.Token, r.shards())
	switch {
	case !ok || granted == id:
		return id, sh, nil
	case t.entity:
		return 0, nil, fmt.Errorf("%w: token %d was granted by shard %d, but the entity named places the key on shard %d: "+
			"name the entity the key was reserved with, or none (the token finds its shard)", keyspace.ErrInvalidToken, t.cmd.Token, granted, id)
	}
	return granted, r.replica(granted), nil
}

// leaderOf is the leader of shard id as this node knows it: its replica's
// view, else the map's hint, else the preferred leader; "" when none.
func (r *router) leaderOf(id int, local *shard.Shard) cluster.NodeID {
	if local != nil {
		if l, _ := local.Leader(); l != "" {
			return cluster.NodeID(l)
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
	id   cluster.NodeID
	addr string
}

// elsewhere decides where operations on shard id go that this node cannot
// serve (cause: errNotHosted or shard.ErrNotLeader). to.addr is set when
// they may be forwarded there; refusal is the answer otherwise, and also
// when forwarding turns out impossible: a Redirect, or on a standalone
// node the cause itself.
func (r *router) elsewhere(id int, local *shard.Shard, cause error) (to peer, refusal error) {
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

// unaryCall is a unary operation RPC of the generated client, by method
// expression (gridpb.GridClient.Reserve, ...).
type unaryCall[R any] func(gridpb.GridClient, context.Context, R, ...grpc.CallOption) (*gridpb.OpResult, error)

// serveOne validates req and runs it here, or forwards it as the same RPC,
// or refuses it with a Redirect (see the routing rules above).
func serveOne[R any](ctx context.Context, s *Server, req R, validate func(R) (target, error), call unaryCall[R]) (*gridpb.OpResult, error) {
	t, err := validate(req)
	if err != nil {
		return nil, toStatus(err)
	}
	r, err := s.opRouter(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	id, sh, err := r.place(t)
	if err != nil {
		return nil, toStatus(err)
	}
	cause := errNotHosted
	if sh != nil {
		res, err := runLocal(ctx, sh, t)
		if err == nil {
			return res, nil
		}
		if r.m == nil || !errors.Is(err, shard.ErrNotLeader) {
			return nil, toStatus(err)
		}
		cause = err
	}
	to, refusal := r.elsewhere(id, sh, cause)
	if to.addr == "" {
		s.metrics.routed(routeRedirected, 1)
		return nil, toStatus(refusal)
	}
	c, err := s.peers.client(to.addr)
	if err != nil {
		return nil, toStatus(refusal) // nothing sent: the client may go there itself
	}
	s.metrics.routed(routeForwarded, 1)
	res, err := call(c, forwardedContext(ctx), req)
	if err != nil {
		return nil, toStatus(forwardError(err, to))
	}
	return res, nil
}

// runLocal runs one validated operation on the local replica sh.
func runLocal(ctx context.Context, sh *shard.Shard, t target) (*gridpb.OpResult, error) {
	if t.read {
		res, err := sh.Get(ctx, t.cmd.Digest, t.staleOK)
		if err != nil {
			return nil, err
		}
		return toProto(&res), nil
	}
	res, err := sh.Propose(ctx, []keyspace.Command{t.cmd})
	if err != nil {
		return nil, err
	}
	return toProto(&res[0]), nil
}
