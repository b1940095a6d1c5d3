package api

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/shard"
)

// ClusterMap returns the map this node holds, with the leader of each shard
// as this node knows it (its replica's view, else the map's hint, else the
// preferred leader). A standalone node describes itself as a one-node map
// that holds and leads every shard.
func (s *Server) ClusterMap(ctx context.Context, _ *gridpb.ClusterMapRequest) (*gridpb.ClusterMapResponse, error) {
	cv := s.opts.Cluster
	if cv == nil {
		return s.standaloneMap(), nil
	}
	r, err := s.router(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	m, alive := r.m, cv.Alive()
	resp := &gridpb.ClusterMapResponse{
		Epoch:         m.Epoch,
		Slots:         m.Slots,
		ShardCount:    uint32(m.Shards),
		Replicas:      uint32(m.Replicas),
		NodeId:        string(r.self),
		ControlLeader: string(cv.ControlLeader()),
	}
	if cv.ControlLeader() == r.self {
		if e, err := cv.CurrentEpoch(ctx); err == nil {
			resp.CurrentEpoch = e
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.Nodes)) {
		n := m.Nodes[id]
		resp.Nodes = append(resp.Nodes, &gridpb.ClusterNode{
			Id:       string(id),
			GrpcAddr: n.GRPCAddr,
			RaftAddr: n.RaftAddr,
			HttpAddr: n.HTTPAddr,
			State:    n.State.String(),
			Alive:    alive[id],
		})
	}
	for id, set := range m.ShardReplicas {
		cs := &gridpb.ClusterShard{Id: uint32(id), Leader: string(r.leaderOf(id, s.host.Replica(id)))}
		for _, n := range set {
			cs.Replicas = append(cs.Replicas, string(n))
		}
		resp.Shards = append(resp.Shards, cs)
	}
	return resp, nil
}

// standaloneMap is a standalone node's answer to ClusterMap. Its own gRPC
// address is left empty: the caller reached it already.
func (s *Server) standaloneMap() *gridpb.ClusterMapResponse {
	set, self := s.host.Settings(), s.host.NodeID()
	resp := &gridpb.ClusterMapResponse{
		Standalone: true,
		NodeId:     self,
		Slots:      set.Slots,
		ShardCount: uint32(set.Shards),
		Replicas:   1,
		Nodes:      []*gridpb.ClusterNode{{Id: self, State: topology.NodeActive.String(), Alive: true}},
	}
	for id := range set.Shards {
		resp.Shards = append(resp.Shards, &gridpb.ClusterShard{Id: uint32(id), Replicas: []string{self}, Leader: self})
	}
	return resp
}

// Drain marks a node draining (node_id "" is this node). Only the control
// group's leader can; any other node forwards the request to it once,
// force included. Without force, a drain that would leave fewer active
// nodes than the replica count is refused (FailedPrecondition, saying why
// and how to force it).
func (s *Server) Drain(ctx context.Context, req *gridpb.DrainRequest) (*gridpb.DrainResponse, error) {
	id := topology.NodeID(req.GetNodeId())
	if id != "" {
		if err := id.Validate(); err != nil {
			return nil, toStatus(fmt.Errorf("%w: %w", errBadNodeID, err))
		}
	}
	cv := s.opts.Cluster
	if cv == nil {
		return nil, toStatus(fmt.Errorf("%w: nothing to drain", errStandalone))
	}
	if id == "" {
		id = cv.Self()
	}
	st, err := cv.Drain(ctx, id, req.GetForce())
	switch {
	case err == nil:
		return &gridpb.DrainResponse{NodeId: string(st.Node), State: st.State.String(), ReplicasLeft: uint32(st.ReplicasLeft), Epoch: st.Epoch}, nil
	case errors.Is(err, topology.ErrNotControlLeader) && !headerSet(ctx, MetadataForwarded):
		return s.forwardDrain(ctx, id, req.GetForce(), err)
	case errors.Is(err, topology.ErrRejected):
		if m := cv.Map(); m != nil {
			if _, known := m.Nodes[id]; !known {
				err = fmt.Errorf("%w %s: not in the cluster map (epoch %d): %w", errUnknownNode, digest.Quote(id), m.Epoch, err)
			}
		}
	}
	return nil, toStatus(err)
}

// forwardDrain sends a drain of node id to the control leader; notLeader
// is this node's refusal, the answer when the leader cannot be reached.
func (s *Server) forwardDrain(ctx context.Context, id topology.NodeID, force bool, notLeader error) (*gridpb.DrainResponse, error) {
	cv := s.opts.Cluster
	leader, m := cv.ControlLeader(), cv.Map()
	if leader == "" || leader == cv.Self() || m == nil || m.Nodes[leader].GRPCAddr == "" {
		return nil, toStatus(notLeader)
	}
	to := peer{id: leader, addr: m.Nodes[leader].GRPCAddr}
	c, err := s.peers.client(to.addr)
	if err != nil {
		return nil, toStatus(notLeader)
	}
	resp, err := c.Drain(forwardedContext(ctx), &gridpb.DrainRequest{NodeId: []byte(id), Force: force})
	if err != nil {
		return nil, toStatus(forwardError(err, to))
	}
	return resp, nil
}

// ShardAdmin changes the Raft configuration of a shard this node leads.
// A valid request fenced by a control term older than the one this node
// knows is refused with FAILED_PRECONDITION (topology.ErrStaleFence) before
// anything is done: its sender no longer leads the control group. So is one
// without a fence (control term 0): every sender in the tree fences its
// requests, and an unfenced one cannot be told from a deposed leader's.
// A node that does not lead the shard answers UNAVAILABLE with a Redirect;
// it is never forwarded (the control leader looks for the shard's leader
// itself).
func (s *Server) ShardAdmin(ctx context.Context, req *gridpb.ShardAdminRequest) (*gridpb.ShardAdminResponse, error) {
	cv := s.opts.Cluster
	if cv == nil {
		return nil, toStatus(fmt.Errorf("%w: its shard groups have this node as their only voter", errStandalone))
	}
	r, err := s.router(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := validateAdmin(req, r.m.Shards); err != nil {
		return nil, toStatus(err)
	}
	if err := checkFence(req, cv.ControlTerm()); err != nil {
		return nil, toStatus(err)
	}
	r.forward = false
	id := int(req.GetShard())
	sh := s.host.Replica(id)
	if sh == nil {
		_, refusal := r.elsewhere(id, nil, errNotHosted)
		return nil, toStatus(refusal)
	}
	if !sh.IsLeader() {
		_, refusal := r.elsewhere(id, sh, shard.ErrNotLeader)
		return nil, toStatus(refusal)
	}
	node, addr := string(req.GetNodeId()), string(req.GetRaftAddr())
	switch req.GetAction() {
	case gridpb.ShardAdminAction_ADD_NONVOTER:
		err = sh.AddNonvoter(ctx, node, addr)
	case gridpb.ShardAdminAction_ADD_VOTER:
		err = sh.AddVoter(ctx, node, addr)
	case gridpb.ShardAdminAction_REMOVE_SERVER:
		err = sh.RemoveServer(ctx, node)
	case gridpb.ShardAdminAction_TRANSFER_LEADERSHIP:
		err = sh.TransferLeadership(ctx, node, addr)
	}
	if errors.Is(err, shard.ErrNotLeader) {
		// Leadership moved before the change was made.
		_, refusal := r.elsewhere(id, sh, err)
		return nil, toStatus(refusal)
	}
	if err != nil {
		return nil, toStatus(err) // the shard's error names the shard and the change
	}
	return &gridpb.ShardAdminResponse{CommitIndex: sh.CommitIndex()}, nil
}

// checkFence refuses a ShardAdmin request planned under a control term
// older than known, the latest this node knows, or under none.
func checkFence(req *gridpb.ShardAdminRequest, known uint64) error {
	term := req.GetControlTerm()
	switch {
	case term == 0:
		return fmt.Errorf("%w: %s of shard %d carries no control term (this node knows term %d)",
			topology.ErrStaleFence, req.GetAction(), req.GetShard(), known)
	case term < known:
		return fmt.Errorf("%w: %s of shard %d planned under control term %d (epoch %d); this node knows term %d",
			topology.ErrStaleFence, req.GetAction(), req.GetShard(), term, req.GetEpoch(), known)
	}
	return nil
}

// validateAdmin checks a ShardAdmin request against a map of shards shards:
// the node id by topology.NodeID's rule, the Raft address by
// topology.ValidateAddr's, before any error names them.
func validateAdmin(req *gridpb.ShardAdminRequest, shards int) error {
	action := req.GetAction()
	node, addr := req.GetNodeId(), req.GetRaftAddr()
	switch {
	case action < gridpb.ShardAdminAction_ADD_NONVOTER || action > gridpb.ShardAdminAction_TRANSFER_LEADERSHIP:
		return fmt.Errorf("%w: unknown action %d", errBadAdmin, action)
	case int64(req.GetShard()) >= int64(shards):
		return fmt.Errorf("%w: shard %d out of range 0..%d", errBadAdmin, req.GetShard(), shards-1)
	case action != gridpb.ShardAdminAction_TRANSFER_LEADERSHIP && len(node) == 0:
		return fmt.Errorf("%w: %s needs a node id", errBadAdmin, action)
	}
	if len(node) > 0 {
		if err := topology.NodeID(node).Validate(); err != nil {
			return fmt.Errorf("%w: %w", errBadAdmin, err)
		}
	}
	if (action == gridpb.ShardAdminAction_ADD_NONVOTER || action == gridpb.ShardAdminAction_ADD_VOTER) && len(addr) == 0 {
		return fmt.Errorf("%w: %s of %s needs its Raft address", errBadAdmin, action, node)
	}
	if len(addr) > 0 {
		if err := topology.ValidateAddr(string(addr)); err != nil {
			return fmt.Errorf("%w: raft_addr: %w", errBadAdmin, err)
		}
	}
	return nil
}
