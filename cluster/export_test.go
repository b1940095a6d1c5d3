package cluster

import (
	"context"

	"github.com/l4xg/grid/cluster/topology"
)

// Hooks for the runtime tests (package cluster_test).

// SnapshotControl snapshots the control group's state now: a restart then
// restores this map and replays every later entry.
func (n *Runtime) SnapshotControl() error { return n.raft.Snapshot().Error() }

// AdmitRounds counts the admission passes this node ran as control leader.
func (n *Runtime) AdmitRounds() uint64 { return n.admitRounds.Load() }

// ActedEpoch is the highest map epoch the replica loop acted on.
func (n *Runtime) ActedEpoch() uint64 { return n.acted.Load() }

// ProposeForTest commits cmd through the control group; n must lead it.
func (n *Runtime) ProposeForTest(ctx context.Context, cmd topology.Command) (uint64, error) {
	return n.propose(ctx, cmd)
}

// ReplicaRounds counts the replica loop's rounds.
func (n *Runtime) ReplicaRounds() uint64 { return n.replicaRounds.Load() }

// ReadinessNow computes the node's readiness from its map now, as the
// replica loop does each round ("" when ready).
func (n *Runtime) ReadinessNow(ctx context.Context) string {
	m, err := n.currentMap(ctx)
	if err != nil {
		return err.Error()
	}
	return n.notCaughtUp(ctx, m)
}

// GossipDrains counts memberlist's calls for broadcasts on this node
// (gossip.Membership.Drains).
func (n *Runtime) GossipDrains() uint64 { return n.ms.Drains() }

// RestoreLeadersForTest runs the control leader's restoreLeaders now, in
// its current control term; n must lead the control group.
func (n *Runtime) RestoreLeadersForTest(ctx context.Context) {
	n.restoreLeaders(withFence(ctx, n.raft.CurrentTerm()))
}
