package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/l4xg/grid/cluster/topology"
)

// pollInterval is how often the executor looks again while it waits for a
// replica to start, catch up or lead.
const pollInterval = 50 * time.Millisecond

// execute carries one move out, add before remove (see Move and the
// package documentation). Each step is idempotent, and the next plan is
// made from the groups as they are, so a move interrupted by a failure or
// a new control leader is finished, or undone, by a later plan. A rejoin
// is the group half of an add (the map lists the node already), an
// eviction the group half of a remove (the map no longer lists it).
func (n *Runtime) execute(ctx context.Context, mv topology.Move) error {
	switch {
	case mv.Rejoin != "":
		return n.addReplica(ctx, topology.Move{Shard: mv.Shard, Add: mv.Rejoin})
	case mv.Evict != "":
		return n.removeFromGroup(ctx, mv.Shard, mv.Evict, "")
	}
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
			if _, err := n.propose(ctx, topology.Command{Type: topology.CmdApplyMove, Move: topology.Move{Shard: mv.Shard, Leader: mv.Leader}}); err != nil {
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
func (n *Runtime) addReplica(ctx context.Context, mv topology.Move) error {
	m := n.Map()
	if len(m.ShardReplicas[mv.Shard]) == 0 {
		return fmt.Errorf("shard %d has no replica to copy from: shard groups are created only with the cluster", mv.Shard)
	}
	if !slices.Contains(m.ShardReplicas[mv.Shard], mv.Add) {
		if _, err := n.propose(ctx, topology.Command{Type: topology.CmdApplyMove, Move: topology.Move{Shard: mv.Shard, Add: mv.Add}}); err != nil {
			return err
		}
	}
	info := n.Map().Nodes[mv.Add]
	if err := n.waitReplica(ctx, info, mv.Shard, func(topology.ReplicaStatus) bool { return true }); err != nil {
		return err
	}
	commit, err := n.adminOnLeader(ctx, topology.AdminRequest{Shard: mv.Shard, Action: topology.AdminAddNonvoter, Node: mv.Add, RaftAddr: info.RaftAddr})
	if err != nil {
		return err
	}
	if err := n.waitReplica(ctx, info, mv.Shard, func(st topology.ReplicaStatus) bool { return st.Applied >= commit }); err != nil {
		return fmt.Errorf("catching up: %w", err)
	}
	_, err = n.adminOnLeader(ctx, topology.AdminRequest{Shard: mv.Shard, Action: topology.AdminAddVoter, Node: mv.Add, RaftAddr: info.RaftAddr})
	return err
}

// removeReplica removes the leaving replica from the group
// (removeFromGroup), and only then commits its removal from the map, upon
// which its node deletes the replica.
func (n *Runtime) removeReplica(ctx context.Context, mv topology.Move) error {
	if err := n.removeFromGroup(ctx, mv.Shard, mv.Remove, mv.Leader); err != nil {
		return err
	}
	if _, err := n.propose(ctx, topology.Command{Type: topology.CmdApplyMove, Move: topology.Move{Shard: mv.Shard, Remove: mv.Remove, Leader: mv.Leader}}); err != nil {
		return err
	}
	if mv.Leader != "" {
		return n.transferTo(ctx, mv.Shard, mv.Leader)
	}
	return nil
}

// removeFromGroup hands the shard's leadership away from id (to to, or
// any other voter) while id leads, then removes id from the group.
func (n *Runtime) removeFromGroup(ctx context.Context, shard int, id, to topology.NodeID) error {
	if to == id {
		to = ""
	}
	for {
		leader, _, err := n.findLeader(ctx, shard)
		if err != nil {
			return err
		}
		if leader != id {
			break
		}
		if err := n.transferTo(ctx, shard, to); err != nil {
			return err
		}
	}
	_, err := n.adminOnLeader(ctx, topology.AdminRequest{Shard: shard, Action: topology.AdminRemoveServer, Node: id})
	return err
}

// catchUpWait bounds how long a leadership move waits for its target to
// catch up (awaitCaughtUp).
const catchUpWait = 10 * time.Second

// transferTo makes target lead shard (target "" = any other voter), unless
// it leads already.
func (n *Runtime) transferTo(ctx context.Context, shard int, target topology.NodeID) error {
	leader, addr, err := n.findLeader(ctx, shard)
	if err != nil || leader == target {
		return err
	}
	req := topology.AdminRequest{Shard: shard, Action: topology.AdminTransferLeadership, Node: target}
	if target != "" {
		info := n.Map().Nodes[target]
		req.RaftAddr = info.RaftAddr
		if leader, addr, err = n.awaitCaughtUp(ctx, shard, info); err != nil || leader == target {
			return err
		}
	}
	_, err = n.shardAdmin(ctx, addr, req)
	return err
}

// awaitCaughtUp waits (waitReplica) until target's replica of shard has
// caught up with the shard's leader (caughtUp), or leads it, and returns
// that leader. It gives up when gossip loses target, or after
// catchUpWait: the next plan deals with it, and a node that cannot catch
// up (its disk is full) does not hold the control loop.
func (n *Runtime) awaitCaughtUp(ctx context.Context, shard int, target topology.NodeInfo) (leader topology.NodeID, addr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, catchUpWait)
	defer cancel()
	err = n.waitReplica(ctx, target, shard, func(st topology.ReplicaStatus) bool {
		id, a, lead, ok := n.leaderOf(ctx, n.Map(), shard)
		leader, addr = id, a
		return ok && (id == target.ID || caughtUp(st, lead))
	})
	return leader, addr, err
}

// restoreLeaders moves each shard's leadership back to its preferred
// leader where an election (a failover, a restart, a full disk) left it
// elsewhere, so that leaders stay spread as the plan spread them. Best
// effort: a shard whose preferred leader is down, lagging or on a disk
// below its reserve (handBack) keeps its leader.
func (n *Runtime) restoreLeaders(ctx context.Context) {
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
		if cur, curSt, ok := n.handBackFrom(cctx, m, s, pref); ok {
			_, err := n.shardAdmin(cctx, cur.GRPCAddr, topology.AdminRequest{Shard: s, Action: topology.AdminTransferLeadership, Node: pref.ID, RaftAddr: pref.RaftAddr})
			if err == nil {
				n.cfg.Logger.Info("leadership restored to preferred leader", "shard", s, "node", pref.ID, "from", cur.ID, "commit", curSt.Commit)
			}
		}
		cancel()
	}
}

// handBackFrom asks the shard's preferred leader pref and the leader it
// follows whether the leadership should go back to pref (handBack), and
// returns that leader and its status.
func (n *Runtime) handBackFrom(ctx context.Context, m *topology.Map, shard int, pref topology.NodeInfo) (topology.NodeInfo, topology.ReplicaStatus, bool) {
	st, ok, err := n.cfg.Remote.ShardStatus(ctx, pref.GRPCAddr, shard)
	if err != nil || !ok || st.RaftState == "Leader" || st.Leader == "" || st.Leader == pref.ID {
		return topology.NodeInfo{}, topology.ReplicaStatus{}, false
	}
	cur, known := m.Nodes[st.Leader]
	if !known {
		return topology.NodeInfo{}, topology.ReplicaStatus{}, false
	}
	curSt, ok, err := n.cfg.Remote.ShardStatus(ctx, cur.GRPCAddr, shard)
	if err != nil || !ok {
		return topology.NodeInfo{}, topology.ReplicaStatus{}, false
	}
	return cur, curSt, handBack(st, curSt)
}

// handBack reports whether a shard's leadership may move from its leader
// (lead's status) to the preferred leader (pref's status). Not while the
// preferred leader's clock is outside the bound: it grants no lease and
// would hand the leadership straight back; nor while its disk is below
// its reserve (its own Status, fresher than gossip): it refuses new keys
// and would hand the leadership straight back too. And not before it has
// caught up with the leader (caughtUp).
func handBack(pref, lead topology.ReplicaStatus) bool {
	return pref.ClockOK && !pref.DiskFull && lead.RaftState == "Leader" && caughtUp(pref, lead)
}

// caughtUp reports whether a replica (st) has applied its leader's commit
// index to within maxReadyLag entries, the bound of a ready replica, so
// that a leadership moved to it costs no wait: while raft catches the
// target of a transfer up, the leader refuses writes, and a new leader
// answers a write only once it has applied every entry before it. A node
// just restarted has its log but may still be applying a long tail of it.
func caughtUp(st, lead topology.ReplicaStatus) bool {
	return st.Applied+maxReadyLag >= lead.Commit
}

// adminOnLeader runs req on the shard's leader, looking for it again
// while leadership moves.
func (n *Runtime) adminOnLeader(ctx context.Context, req topology.AdminRequest) (uint64, error) {
	for {
		_, addr, err := n.findLeader(ctx, req.Shard)
		if err != nil {
			return 0, err
		}
		commit, err := n.shardAdmin(ctx, addr, req)
		if err == nil || !errors.Is(err, topology.ErrNotShardLeader) {
			return commit, err
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return 0, err
		}
	}
}

// findLeader looks for the shard's leader (leaderOf) until one answers
// or ctx ends.
func (n *Runtime) findLeader(ctx context.Context, shard int) (topology.NodeID, string, error) {
	for {
		if id, addr, _, ok := n.leaderOf(ctx, n.Map(), shard); ok {
			return id, addr, nil
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return "", "", fmt.Errorf("no leader of shard %d: %w", shard, err)
		}
	}
}

// leaderOf asks the shard's replicas, as m lists them, which of them
// leads, and then the leader they name when m does not list it (a group
// member the map dropped); each asked for at most statusTimeout. It
// returns the leader's status.
func (n *Runtime) leaderOf(ctx context.Context, m *topology.Map, shard int) (topology.NodeID, string, topology.ReplicaStatus, bool) {
	ask := slices.Clone(m.ShardReplicas[shard])
	asked := map[topology.NodeID]bool{}
	for len(ask) > 0 && ctx.Err() == nil {
		id := ask[0]
		ask = ask[1:]
		info, known := m.Nodes[id]
		if asked[id] || !known {
			continue
		}
		asked[id] = true
		cctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, ok, err := n.cfg.Remote.ShardStatus(cctx, info.GRPCAddr, shard)
		cancel()
		switch {
		case err != nil || !ok:
		case st.RaftState == "Leader":
			return id, info.GRPCAddr, st, true
		case st.Leader != "" && !asked[st.Leader]:
			ask = append(ask, st.Leader)
		}
	}
	return "", "", topology.ReplicaStatus{}, false
}

// statusTimeout bounds one status request to a node.
const statusTimeout = time.Second

// maxParallelObserve bounds the shards observed at once.
const maxParallelObserve = 8

// observeGroups returns every shard's group as its leader reports it
// (GroupOf), asking up to maxParallelObserve shards at once. A shard with
// no replica, or whose leader did not answer, is unknown.
func (n *Runtime) observeGroups(ctx context.Context, m *topology.Map) []topology.Group {
	groups := make([]topology.Group, len(m.ShardReplicas))
	sem := make(chan struct{}, maxParallelObserve)
	var wg sync.WaitGroup
	for s, set := range m.ShardReplicas {
		if len(set) == 0 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, _, st, ok := n.leaderOf(ctx, m, s); ok {
				groups[s] = GroupOf(st)
			}
		}()
	}
	wg.Wait()
	return groups
}

// fenceKey carries the control term a round was planned under.
type fenceKey struct{}

// withFence returns ctx carrying the control term of the round it runs.
func withFence(ctx context.Context, term uint64) context.Context {
	return context.WithValue(ctx, fenceKey{}, term)
}

// shardAdmin sends req to the node at addr fenced by the round's control
// term (from ctx) and the current map epoch: a node that knows a later
// term refuses it with ErrStaleFence.
func (n *Runtime) shardAdmin(ctx context.Context, addr string, req topology.AdminRequest) (uint64, error) {
	term, _ := ctx.Value(fenceKey{}).(uint64)
	if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return 0, fmt.Errorf("%w: %s of shard %d planned in control term %d", topology.ErrNotControlLeader, req.Action, req.Shard, term)
	}
	req.Fence = topology.Fence{ControlTerm: term}
	if m := n.Map(); m != nil {
		req.Fence.Epoch = m.Epoch
	}
	return n.cfg.Remote.ShardAdmin(ctx, addr, req)
}

// waitReplica polls the node's replica of shard until cond holds. It gives
// up when gossip loses the node: the next plan deals with it.
func (n *Runtime) waitReplica(ctx context.Context, info topology.NodeInfo, shard int, cond func(topology.ReplicaStatus) bool) error {
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
