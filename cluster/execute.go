package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// pollInterval is how often the executor looks again while it waits for a
// replica to start, catch up or lead.
const pollInterval = 50 * time.Millisecond

// execute carries one move out, add before remove (see Move and the
// package documentation). Each step is idempotent, so a move interrupted
// by a failure or a new control leader is finished, or undone, by a later
// plan.
func (n *Node) execute(ctx context.Context, mv Move) error {
	if mv.Add != "" {
		if err := n.addReplica(ctx, mv); err != nil {
			return err
		}
	}
	switch {
	case mv.Remove != "":
		return n.removeReplica(ctx, mv)
	case mv.Leader != "":
		if cur := n.Map().ShardReplicas[mv.Shard]; len(cur) > 0 && cur[0] != mv.Leader {
			if _, err := n.propose(ctx, Command{Type: CmdApplyMove, Move: Move{Shard: mv.Shard, Leader: mv.Leader}}); err != nil {
				return err
			}
		}
		return n.transferTo(ctx, mv.Shard, mv.Leader)
	}
	return nil
}

// addReplica commits the new replica to the map, waits until its node runs
// it, then has the shard's leader add it as a non-voter, waits until it has
// applied everything committed before, and promotes it to voter: commits
// never wait on a replica that is still copying a snapshot. A shard with
// no replica is not given one: shard groups are created only with the
// cluster (bootstrapMap), and a shard whose replicas are all gone has lost
// its data, which is an operator's matter.
func (n *Node) addReplica(ctx context.Context, mv Move) error {
	m := n.Map()
	if len(m.ShardReplicas[mv.Shard]) == 0 {
		return fmt.Errorf("shard %d has no replica to copy from: shard groups are created only with the cluster", mv.Shard)
	}
	if !slices.Contains(m.ShardReplicas[mv.Shard], mv.Add) {
		if _, err := n.propose(ctx, Command{Type: CmdApplyMove, Move: Move{Shard: mv.Shard, Add: mv.Add}}); err != nil {
			return err
		}
	}
	info := n.Map().Nodes[mv.Add]
	if err := n.waitReplica(ctx, info, mv.Shard, func(ReplicaStatus) bool { return true }); err != nil {
		return err
	}
	commit, err := n.adminOnLeader(ctx, AdminRequest{Shard: mv.Shard, Action: AdminAddNonvoter, Node: mv.Add, RaftAddr: info.RaftAddr})
	if err != nil {
		return err
	}
	if err := n.waitReplica(ctx, info, mv.Shard, func(st ReplicaStatus) bool { return st.Applied >= commit }); err != nil {
		return fmt.Errorf("catching up: %w", err)
	}
	_, err = n.adminOnLeader(ctx, AdminRequest{Shard: mv.Shard, Action: AdminAddVoter, Node: mv.Add, RaftAddr: info.RaftAddr})
	return err
}

// removeReplica hands the shard's leadership away from the leaving
// replica, removes it from the group, and only then commits its removal
// from the map, upon which its node deletes the replica.
func (n *Node) removeReplica(ctx context.Context, mv Move) error {
	for {
		leader, _, err := n.findLeader(ctx, mv.Shard)
		if err != nil {
			return err
		}
		if leader != mv.Remove {
			break
		}
		to := mv.Leader
		if to == mv.Remove {
			to = ""
		}
		if err := n.transferTo(ctx, mv.Shard, to); err != nil {
			return err
		}
	}
	if _, err := n.adminOnLeader(ctx, AdminRequest{Shard: mv.Shard, Action: AdminRemoveServer, Node: mv.Remove}); err != nil {
		return err
	}
	if _, err := n.propose(ctx, Command{Type: CmdApplyMove, Move: Move{Shard: mv.Shard, Remove: mv.Remove, Leader: mv.Leader}}); err != nil {
		return err
	}
	if mv.Leader != "" {
		return n.transferTo(ctx, mv.Shard, mv.Leader)
	}
	return nil
}

// transferTo makes target lead shard (target "" = any other voter), unless
// it leads already.
func (n *Node) transferTo(ctx context.Context, shard int, target NodeID) error {
	leader, addr, err := n.findLeader(ctx, shard)
	if err != nil || leader == target {
		return err
	}
	req := AdminRequest{Shard: shard, Action: AdminTransferLeadership, Node: target}
	if target != "" {
		req.RaftAddr = n.Map().Nodes[target].RaftAddr
	}
	_, err = n.shardAdmin(ctx, addr, req)
	return err
}

// restoreLeaders moves each shard's leadership back to its preferred
// leader where an election (a failover, a restart) left it elsewhere, so
// that leaders stay spread as the plan spread them. Best effort: a shard
// whose preferred leader is down or lagging keeps its leader.
func (n *Node) restoreLeaders(ctx context.Context) {
	m := n.Map()
	if m == nil {
		return
	}
	alive := n.Alive()
	for s, set := range m.ShardReplicas {
		if len(set) < 2 || !alive[set[0]] || ctx.Err() != nil {
			continue
		}
		pref := m.Nodes[set[0]]
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, ok, err := n.cfg.Remote.ShardStatus(cctx, pref.GRPCAddr, s)
		if err == nil && ok && st.RaftState != "Leader" && st.Leader != "" && st.Leader != pref.ID {
			if cur, known := m.Nodes[st.Leader]; known {
				_, err = n.shardAdmin(cctx, cur.GRPCAddr, AdminRequest{Shard: s, Action: AdminTransferLeadership, Node: pref.ID, RaftAddr: pref.RaftAddr})
				if err == nil {
					n.cfg.Logger.Info("leadership restored to preferred leader", "shard", s, "node", pref.ID)
				}
			}
		}
		cancel()
	}
}

// adminOnLeader runs req on the shard's leader, looking for it again
// while leadership moves.
func (n *Node) adminOnLeader(ctx context.Context, req AdminRequest) (uint64, error) {
	for {
		_, addr, err := n.findLeader(ctx, req.Shard)
		if err != nil {
			return 0, err
		}
		commit, err := n.shardAdmin(ctx, addr, req)
		if err == nil || !errors.Is(err, ErrNotShardLeader) {
			return commit, err
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return 0, err
		}
	}
}

// shardAdmin sends req to the node at addr, fenced by this node's current
// control term and map epoch.
func (n *Node) shardAdmin(ctx context.Context, addr string, req AdminRequest) (uint64, error) {
	req.Fence = Fence{ControlTerm: n.raft.CurrentTerm()}
	if m := n.Map(); m != nil {
		req.Fence.Epoch = m.Epoch
	}
	return n.cfg.Remote.ShardAdmin(ctx, addr, req)
}

// findLeader asks the shard's replicas (as the map lists them) which of
// them leads, until one does or ctx ends.
func (n *Node) findLeader(ctx context.Context, shard int) (NodeID, string, error) {
	for {
		m := n.Map()
		for _, id := range m.ShardReplicas[shard] {
			info := m.Nodes[id]
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, ok, err := n.cfg.Remote.ShardStatus(cctx, info.GRPCAddr, shard)
			cancel()
			if err == nil && ok && st.RaftState == "Leader" {
				return id, info.GRPCAddr, nil
			}
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return "", "", fmt.Errorf("no leader of shard %d: %w", shard, err)
		}
	}
}

// waitReplica polls the node's replica of shard until cond holds. It gives
// up when gossip loses the node: the next plan deals with it.
func (n *Node) waitReplica(ctx context.Context, info NodeInfo, shard int, cond func(ReplicaStatus) bool) error {
	for {
		if !n.Alive()[info.ID] {
			return fmt.Errorf("replica of shard %d: node %s is not alive", shard, info.ID)
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, ok, err := n.cfg.Remote.ShardStatus(cctx, info.GRPCAddr, shard)
		cancel()
		if err == nil && ok && cond(st) {
			return nil
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return fmt.Errorf("replica of shard %d on %s: %w", shard, info.ID, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
