package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
	"golang.org/x/sync/errgroup"
)

// maxParallelMoves bounds the moves the control leader runs at once, each
// on a different shard.
const maxParallelMoves = 4

// moveTimeout bounds one move. A move cut short leaves its shard's group
// and map set apart, which the next round's plan repairs.
const moveTimeout = 60 * time.Second

// controlLoop runs the reconciler while this node leads the control group.
// Each round: bootstrap the map if there is none, admit the nodes gossip
// shows, keep the control group's membership, remove drained nodes, then
// observe the shard groups, plan and execute moves, at most one per shard
// at a time. A new leader first applies a barrier, so it plans from every
// entry committed before it. A round is fenced by the term it runs under:
// its context ends as soon as this node stops leading or the term changes
// (watchLeadership), and every shard admin request carries that term.
func (n *Runtime) controlLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.ReconcileInterval)
	defer t.Stop()
	var (
		grace    *topology.Grace
		term     uint64
		lastLead time.Time
	)
	done, stopDone := context.WithCancel(context.Background())
	defer stopDone()
	go func() {
		select {
		case <-n.quit:
		case <-done.Done():
		}
		stopDone()
	}()
	for {
		select {
		case <-n.quit:
			return
		case <-n.wake:
		case <-t.C:
		case <-n.ctl.Changed():
		}
		if n.raft.State() != raft.Leader {
			grace = nil
			continue
		}
		if cur := n.raft.CurrentTerm(); grace == nil || cur != term {
			bctx, cancel := context.WithTimeout(done, barrierTimeout)
			err := n.catchUp(bctx)
			cancel()
			if err != nil {
				continue
			}
			term, grace = cur, &topology.Grace{Period: n.cfg.GracePeriod}
			lastLead = time.Time{}
		}
		ctx, cancel := context.WithCancel(withFence(done, term))
		watched := n.watchLeadership(ctx, cancel, term)
		if err := n.reconcile(ctx, grace); err != nil && ctx.Err() == nil {
			n.cfg.Logger.Info("reconcile", "err", err)
		}
		if now := n.cfg.Clock(); now.Sub(lastLead) > 5*time.Second && ctx.Err() == nil {
			lastLead = now
			n.restoreLeaders(ctx)
		}
		cancel()
		<-watched
	}
}

// leadershipPoll is how often a round checks that its node still leads
// the control group in the round's term.
const leadershipPoll = 50 * time.Millisecond

// watchLeadership cancels the round (cancel) once this node no longer
// leads the control group or its term is no longer term. The returned
// channel is closed when the watcher has ended, which it does when ctx
// ends.
func (n *Runtime) watchLeadership(ctx context.Context, cancel context.CancelFunc, term uint64) <-chan struct{} {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(leadershipPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
				n.cfg.Logger.Info("control leadership lost: the round stops", "term", term)
				cancel()
				return
			}
		}
	}()
	return ended
}

// reconcile runs one round; see controlLoop.
func (n *Runtime) reconcile(ctx context.Context, grace *topology.Grace) error {
	alive := n.aliveMeta()
	m := n.Map()
	if m == nil {
		return n.bootstrapMap(ctx, alive)
	}
	if err := n.admit(ctx, m, alive); err != nil {
		return err
	}
	m = n.Map()
	aliveSet := make(map[topology.NodeID]bool, len(alive))
	for id := range alive {
		aliveSet[id] = true
	}
	now := n.cfg.Clock()
	grace.Observe(now, m, aliveSet)
	deadFor := grace.DeadFor(now)
	if err := n.reconcileControl(ctx, m, aliveSet, deadFor); err != nil {
		return err
	}
	for id, info := range m.Nodes {
		if info.State == topology.NodeDraining && !m.Holds(id) {
			if _, err := n.propose(ctx, topology.Command{Type: topology.CmdNodeRemove, ID: id}); err != nil {
				return err
			}
			n.cfg.Logger.Info("drained node removed", "node", id)
		}
	}
	m = n.Map()
	moves := topology.PlanGroups(m, aliveSet, deadFor, n.observeGroups(ctx, m))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(moves) == 0 {
		return nil
	}
	return n.executeRound(ctx, moves)
}

// aliveMeta is the gossip view: the alive members whose metadata decoded.
func (n *Runtime) aliveMeta() map[topology.NodeID]topology.NodeMeta {
	out := map[topology.NodeID]topology.NodeMeta{}
	for _, m := range n.ms.Members() {
		if m.State == gossip.MemberAlive && m.MetaErr == nil && m.Meta.RaftAddr != "" && m.Meta.GRPCAddr != "" {
			out[m.ID] = m.Meta
		}
	}
	return out
}

func infoOf(meta topology.NodeMeta) topology.NodeInfo {
	return topology.NodeInfo{ID: meta.ID, GRPCAddr: meta.GRPCAddr, RaftAddr: meta.RaftAddr, HTTPAddr: meta.HTTPAddr, State: topology.NodeActive, Incarnation: meta.Incarnation}
}

// initialShards is the shard count of a new cluster when its founding node
// was not given one (--shards): as few shards as give every one of the
// nodes founding nodes a replica, with replicas replicas a shard, so
// nodes / replicas rounded up (1 on 3 nodes of 3 replicas, 2 on 4 to 6). A
// group's cost is per entry and a node's log writes per group: the fewer
// groups, the more commands each entry carries and the fewer log writes
// and fdatasyncs each node makes for them. On 3 nodes of one machine, 1
// shard against 3 served 2x the reserves at 2.4x less node CPU each
// (bench/README.md). A cluster meant to grow past its founding size is
// created with --shards: nodes that join later hold replicas only while
// shards x replicas leave some to move to them.
func initialShards(nodes, replicas int, slots uint32) int {
	per := max(1, replicas)
	return max(1, min((nodes+per-1)/per, int(slots), topology.MaxShards))
}

// bootstrapMap commits the first map: every node gossip shows alive, with
// its incarnation, the host's hard settings (a shard count per
// initialShards when the host has none yet), and every shard's replica set
// as the planner places it on an empty cluster (initialSets). That map
// records the shards' creation: each replica it lists bootstraps its
// group with exactly that set, and no shard group is created afterwards.
func (n *Runtime) bootstrapMap(ctx context.Context, alive map[topology.NodeID]topology.NodeMeta) error {
	set := n.cfg.Host.Settings()
	shards := set.Shards
	if shards == 0 {
		shards = initialShards(len(alive), n.cfg.Replicas, set.Slots)
	}
	m := &topology.Map{Slots: set.Slots, Shards: shards, Replicas: n.cfg.Replicas,
		Nodes: map[topology.NodeID]topology.NodeInfo{}, ShardReplicas: make([][]topology.NodeID, shards)}
	for id, meta := range alive {
		m.Nodes[id] = infoOf(meta)
	}
	m = topology.InitialSets(m)
	if _, err := n.propose(ctx, topology.Command{Type: topology.CmdBootstrap, Map: m}); err != nil && !errors.Is(err, topology.ErrRejected) {
		return err
	}
	n.cfg.Logger.Info("cluster map bootstrapped", "nodes", len(m.Nodes), "shards", m.Shards, "replicas", m.Replicas)
	return nil
}

// admit records in the map every alive node it lacks, or whose addresses
// changed. A removed node comes back only with a wiped data directory: it
// is admitted again (active, empty) when it gossips an incarnation other
// than the one it was removed under; with the same one it stays removed.
// A node still in the cluster that gossips a new incarnation lost its data:
// it is left as the map has it (it hosts nothing) until it is drained.
// Each refusal is logged once per incarnation.
func (n *Runtime) admit(ctx context.Context, m *topology.Map, alive map[topology.NodeID]topology.NodeMeta) error {
	for _, id := range slices.Sorted(maps.Keys(alive)) {
		meta := alive[id]
		want := infoOf(meta)
		old, known := m.Nodes[id]
		switch {
		case !known:
		case old.State == topology.NodeRemoved && (meta.Incarnation == 0 || meta.Incarnation == old.Incarnation):
			n.logOnce(id, meta.Incarnation, "removed node is up again with the data directory it was removed with: it stays removed (wipe its data directory to bring it back empty)",
				"node", id, "incarnation", fmt.Sprintf("%x", meta.Incarnation))
			continue
		case old.State == topology.NodeRemoved:
			n.cfg.Logger.Info("removed node is back with a wiped data directory: admitting it again",
				"node", id, "was", fmt.Sprintf("%x", old.Incarnation), "incarnation", fmt.Sprintf("%x", meta.Incarnation))
		case old.Incarnation != 0 && meta.Incarnation != 0 && old.Incarnation != meta.Incarnation:
			n.logOnce(id, meta.Incarnation, "node is up with a wiped data directory while the map still gives it replicas: it hosts nothing until drained (gridnode drain --force), then it is admitted again",
				"node", id, "state", old.State, "map_incarnation", fmt.Sprintf("%x", old.Incarnation), "incarnation", fmt.Sprintf("%x", meta.Incarnation))
			continue
		case old.GRPCAddr == want.GRPCAddr && old.RaftAddr == want.RaftAddr && old.HTTPAddr == want.HTTPAddr && (meta.Incarnation == 0 || meta.Incarnation == old.Incarnation):
			continue
		}
		if _, err := n.propose(ctx, topology.Command{Type: topology.CmdNodeJoin, Node: want}); err != nil {
			return fmt.Errorf("admit %s: %w", id, err)
		}
		n.cfg.Logger.Info("node admitted", "node", id, "grpc", want.GRPCAddr, "raft", want.RaftAddr)
	}
	n.admitRounds.Add(1)
	return nil
}

// logOnce logs msg at warn for node id's incarnation inc, unless it did for
// that incarnation already.
func (n *Runtime) logOnce(id topology.NodeID, inc uint64, msg string, args ...any) {
	n.mu.Lock()
	last, seen := n.loggedOnce[id]
	n.loggedOnce[id] = inc
	n.mu.Unlock()
	if !seen || last != inc {
		n.cfg.Logger.Warn(msg, args...)
	}
}

// reconcileControl executes PlanControl's changes of the control group's
// membership, each logged at info.
func (n *Runtime) reconcileControl(ctx context.Context, m *topology.Map, alive map[topology.NodeID]bool, deadFor func(topology.NodeID) bool) error {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	var members []topology.GroupMember
	for _, s := range f.Configuration().Servers {
		members = append(members, topology.GroupMember{ID: topology.NodeID(s.ID), Voter: s.Suffrage == raft.Voter})
	}
	const timeout = 10 * time.Second
	for _, c := range topology.PlanControl(m, n.cfg.ID, members, alive, deadFor) {
		if err := ctx.Err(); err != nil {
			return err
		}
		id, addr := raft.ServerID(c.Node), raft.ServerAddress(c.RaftAddr)
		var err error
		switch c.Action {
		case topology.ControlAddNonvoter:
			err = n.raft.AddNonvoter(id, addr, 0, timeout).Error()
		case topology.ControlPromote:
			err = n.raft.AddVoter(id, addr, 0, timeout).Error()
		case topology.ControlRemove:
			err = n.raft.RemoveServer(id, 0, timeout).Error()
		case topology.ControlHandOver:
			err = n.raft.LeadershipTransfer().Error()
		}
		if err != nil {
			return fmt.Errorf("control group: %v: %w", c, err)
		}
		n.cfg.Logger.Info("control group changed", "action", c.Action.String(), "node", c.Node, "why", c.Why)
		if c.Action == topology.ControlHandOver {
			return nil
		}
	}
	return nil
}

// executeRound runs the first move of each shard in moves, up to
// maxParallelMoves at once, and waits for them. A move refused with
// ErrStaleFence (a shard's node knows a later control term: this node
// does not lead any more) or ErrNotControlLeader stops the round: no move
// starts after it, and the moves running see their context end. Any other
// failure leaves the other moves going. It returns the failures joined.
func (n *Runtime) executeRound(ctx context.Context, moves []topology.Move) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	seen := map[int]bool{}
	var first []topology.Move
	for _, mv := range moves {
		if !seen[mv.Shard] {
			seen[mv.Shard] = true
			first = append(first, mv)
		}
	}
	var (
		g    errgroup.Group
		mu   sync.Mutex
		errs []error
	)
	g.SetLimit(maxParallelMoves)
	for _, mv := range first {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if ctx.Err() != nil {
				return nil // the round stopped while this move waited for its turn
			}
			mctx, cancel := context.WithTimeout(ctx, moveTimeout)
			defer cancel()
			if err := n.execute(mctx, mv); err != nil {
				if errors.Is(err, topology.ErrStaleFence) || errors.Is(err, topology.ErrNotControlLeader) {
					stop()
				}
				mu.Lock()
				errs = append(errs, fmt.Errorf("%v: %w", mv, err))
				mu.Unlock()
				return nil // the other moves go on: errors are joined below
			}
			n.cfg.Logger.Info("move done", "move", mv.String())
			return nil
		})
	}
	_ = g.Wait() // every function returns nil
	return errors.Join(errs...)
}

// GroupOf turns what a shard's leader reports into a Group: known only
// when the replica leads and its configuration is committed.
func GroupOf(st topology.ReplicaStatus) topology.Group {
	if st.RaftState != "Leader" || !st.ConfigCommitted || len(st.Group) == 0 {
		return topology.Group{}
	}
	g := topology.Group{Known: true}
	for _, mb := range st.Group {
		if mb.Voter {
			g.Voters = append(g.Voters, mb.ID)
		} else {
			g.Nonvoters = append(g.Nonvoters, mb.ID)
		}
	}
	return g
}
