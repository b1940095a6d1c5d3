package api

import (
	"context"

	"github.com/l4xg/grid/cluster/topology"
)

// ClusterView is what the server needs of the node's cluster runtime
// (*cluster.Runtime implements it). A standalone node has none: it holds
// every shard and serves every operation itself.
type ClusterView interface {
	// Self is this node's id.
	Self() topology.NodeID
	// Map returns a copy of the cluster map, or nil before bootstrap.
	Map() *topology.Map
	// Alive is the gossip view: the members seen alive.
	Alive() map[topology.NodeID]bool
	// ControlLeader is the control group's leader as this node knows it
	// ("" when unknown).
	ControlLeader() topology.NodeID
	// ControlState is this node's Raft state in the control group.
	ControlState() string
	// ControlTerm is the latest control group term this node knows; shard
	// admin requests fenced by an older one are refused.
	ControlTerm() uint64
	// Drain marks node id draining (the planner then moves its replicas
	// away and removes it). Only the control leader can; elsewhere it
	// fails with topology.ErrNotControlLeader. Unless force, it refuses a
	// drain that would leave fewer active nodes than the replica count
	// (topology.ErrUnderReplicated).
	Drain(ctx context.Context, id topology.NodeID, force bool) (topology.DrainStatus, error)
	// Ready reports whether the node serves (cluster.Runtime.Ready).
	Ready() bool
	// CurrentEpoch is the current map's epoch, known only to the control
	// leader once caught up with its term (it fails elsewhere).
	CurrentEpoch(ctx context.Context) (uint64, error)
}
