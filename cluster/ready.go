package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"
	"github.com/l4xg/grid/cluster/topology"
)

// notCaughtUp says why this node is not ready with m, its current map, or
// "" when it is: it is in m and not removed, it may host replicas
// (checkHostable), and each replica m gives it runs, is a voter of its
// group, and has applied its leader's commit index within maxReadyLag
// entries. A non-voter is not ready, even one the map lists: it is still
// copying the log and counts toward no quorum. A replica's own commit
// index says little (a follower catching up takes min(leader's commit,
// last index received), equal to its applied index between batches), so
// the leader is asked for its commit index.
func (n *Runtime) notCaughtUp(ctx context.Context, m *topology.Map) string {
	info, ok := m.Nodes[n.cfg.ID]
	switch {
	case !ok:
		return fmt.Sprintf("not in the cluster map yet (epoch %d)", m.Epoch)
	case info.State == topology.NodeRemoved:
		return fmt.Sprintf("removed from the cluster (map epoch %d)", m.Epoch)
	}
	if err := n.SettingsError(); err != nil {
		return err.Error()
	}
	for s, rs := range m.ShardReplicas {
		if !slices.Contains(rs, n.cfg.ID) {
			continue
		}
		if why := n.replicaBehind(ctx, m, s); why != "" {
			return fmt.Sprintf("shard %d: %s", s, why)
		}
	}
	return ""
}

// replicaBehind says why this node's replica of shard s is not caught up
// ("" when it is).
func (n *Runtime) replicaBehind(ctx context.Context, m *topology.Map, s int) string {
	r := n.cfg.Host.Replica(s)
	if r == nil {
		return "replica not running"
	}
	servers, err := r.Configuration()
	if err != nil {
		return err.Error()
	}
	i := slices.IndexFunc(servers, func(srv raft.Server) bool { return srv.ID == raft.ServerID(n.cfg.ID) })
	switch {
	case i < 0:
		return "not a member of its group yet"
	case servers[i].Suffrage != raft.Voter:
		return "a non-voter of its group, still catching up"
	case r.IsLeader():
		return ""
	}
	leader, _ := r.Leader()
	if leader == "" {
		return "no leader known"
	}
	addr := m.Nodes[topology.NodeID(leader)].GRPCAddr
	if addr == "" {
		return fmt.Sprintf("leader %s not in the map", leader)
	}
	cctx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
	st, ok, err := n.cfg.Remote.ShardStatus(cctx, addr, s)
	cancel()
	switch {
	case err != nil:
		return fmt.Sprintf("leader %s: %v", leader, err)
	case !ok || st.RaftState != "Leader":
		return fmt.Sprintf("%s does not lead the group any more", leader)
	}
	// Read after the leader's commit: the lag is not understated.
	applied := r.Status().AppliedIndex
	if st.Commit > applied+maxReadyLag {
		return fmt.Sprintf("applied index %d, %d behind its leader's commit %d", applied, st.Commit-applied, st.Commit)
	}
	return ""
}

// Ready reports whether this node serves: its map is the current one (see
// the replica loop), it is in the map and not removed, and each replica
// the map gives it runs as a voter of its group within maxReadyLag
// entries of its leader's commit. The replica loop computes it; reading
// it is cheap. A round's verdict may come from a map that a later entry
// has replaced while the round ran; removal is final, so it is checked
// against the map in force now, and a removed node is never ready.
func (n *Runtime) Ready() bool {
	return n.ready.Load() && n.ctl.NodeState(n.cfg.ID) != topology.NodeRemoved
}

// Readiness is Ready with the reason when not ready.
func (n *Runtime) Readiness() (bool, string) {
	if n.ctl.NodeState(n.cfg.ID) == topology.NodeRemoved {
		return false, "removed from the cluster"
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ready.Load(), n.notReady
}
