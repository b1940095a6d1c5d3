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

// Replica loop timing.
const (
	// replicaInterval is how often the replica loop looks again when no
	// map change wakes it: it retries failed starts and stops and
	// refreshes readiness.
	replicaInterval = 500 * time.Millisecond
	// replicaAskTimeout bounds one question to another node.
	replicaAskTimeout = time.Second
	// maxReadyLag is how many entries a ready replica may trail its
	// leader's commit index by.
	maxReadyLag = 64
)

// replicaLoop keeps the local shard replicas in line with the current map,
// on every node, and computes the node's readiness.
//
// The control group snapshots only every so many entries, so a restarting
// node re-applies much of the control log: its map walks through history
// before it reaches the present. The loop therefore acts only on a map
// that is current (see currentMap): one whose epoch has reached the epoch
// the control leader reports now, and the epoch this node last acted on
// (kept durably). While its map is not current it changes nothing: the
// replicas it had resume at start from their own state (resumeReplicas),
// and no others start or stop.
//
// From a current map it starts a replica of each shard whose set lists
// this node. A replica bootstraps its group only while the shard is at its
// creation set (Map.Created) and this node is the incarnation the map
// knows; otherwise it starts empty and waits for the shard's leader to
// add it. It purges (stops and deletes) a replica the map no longer gives
// it only once the shard's leader reports a committed group configuration
// without it (see purge): a node never drops a replica its group still
// counts on.
func (n *Runtime) replicaLoop() {
	defer n.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(replicaInterval)
	defer t.Stop()
	for {
		changed := n.ctl.Changed()
		n.replicaRound(ctx)
		select {
		case <-n.quit:
			return
		case <-changed:
		case <-t.C:
		}
	}
}

// replicaRound syncs the replicas from the current map and records the
// node's readiness.
func (n *Runtime) replicaRound(ctx context.Context) {
	defer n.replicaRounds.Add(1)
	m, err := n.currentMap(ctx)
	if err != nil {
		// A removed node is usually out of the control group too, so its
		// map stops at its removal: that is final for this incarnation.
		if own := n.ctl.Map(); own != nil && own.Nodes[n.cfg.ID].State == topology.NodeRemoved {
			n.setReady(fmt.Sprintf("removed from the cluster (map epoch %d)", own.Epoch))
			return
		}
		n.setReady(err.Error())
		return
	}
	if err := n.syncReplicas(ctx, m); err != nil && ctx.Err() == nil && !errors.Is(err, errHostableLogged) {
		n.cfg.Logger.Warn("replicas", "err", err)
	}
	n.setReady(n.notCaughtUp(ctx, m))
}

func (n *Runtime) setReady(why string) {
	n.mu.Lock()
	n.notReady = why
	n.ready.Store(why == "")
	n.mu.Unlock()
}

// currentMap returns this node's map if it is current: its epoch is at
// least the control leader's current epoch, asked now (a read-index; on
// the leader, its own map after a barrier in its term), and at least the
// epoch this node last acted on. Errors wrap ErrNotCurrent.
func (n *Runtime) currentMap(ctx context.Context) (*topology.Map, error) {
	want, err := n.leaderEpoch(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotCurrent, err)
	}
	want = max(want, n.acted.Load())
	m := n.ctl.Map()
	switch {
	case m == nil:
		return nil, fmt.Errorf("%w: no map yet (current epoch %d)", ErrNotCurrent, want)
	case m.Epoch < want:
		return nil, fmt.Errorf("%w: map at epoch %d, current epoch %d", ErrNotCurrent, m.Epoch, want)
	}
	return m, nil
}

// leaderEpoch is the control leader's current epoch. A leader that has not
// applied a barrier in its term yet applies one first.
func (n *Runtime) leaderEpoch(ctx context.Context) (uint64, error) {
	if n.raft.State() == raft.Leader {
		cctx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
		defer cancel()
		return n.CurrentEpoch(cctx)
	}
	leader := n.ControlLeader()
	if leader == "" {
		return 0, errors.New("no control leader known")
	}
	addr := n.grpcAddrOf(leader)
	if addr == "" {
		return 0, fmt.Errorf("no address of control leader %s", leader)
	}
	cctx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
	defer cancel()
	return n.cfg.Remote.ControlEpoch(cctx, addr)
}

// grpcAddrOf is node id's client address, from gossip or else the map.
func (n *Runtime) grpcAddrOf(id topology.NodeID) string {
	for _, mem := range n.ms.Members() {
		if mem.ID == id && mem.MetaErr == nil && mem.Meta.GRPCAddr != "" {
			return mem.Meta.GRPCAddr
		}
	}
	if m := n.ctl.Map(); m != nil {
		return m.Nodes[id].GRPCAddr
	}
	return ""
}

// resumeReplicas starts, at the node's start, every replica that has state
// on disk: it resumes what the node ran before it stopped, whatever its
// (possibly historical) map says. The replica loop purges those the
// current map and their groups no longer count on. Replicas restore their
// snapshots in parallel: a restart takes as long as the largest one.
func (n *Runtime) resumeReplicas() {
	host := n.cfg.Host
	var wg sync.WaitGroup
	for s := range host.Settings().Shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			has, err := host.HasState(s)
			if err == nil && has {
				_, err = host.StartReplica(s, false)
				if err == nil {
					n.cfg.Logger.Info("replica resumed", "shard", s)
				}
			}
			if err != nil {
				n.cfg.Logger.Warn("resume replica", "shard", s, "err", err)
			}
		}()
	}
	wg.Wait()
}

// syncReplicas acts on m, a current map: see replicaLoop.
func (n *Runtime) syncReplicas(ctx context.Context, m *topology.Map) error {
	if err := n.checkHostable(m); err != nil {
		return err
	}
	if m.Epoch > n.acted.Load() {
		// Written before acting: after a restart, nothing older than
		// what this node already acted on is current.
		if err := n.store.SetUint64(actedKey, m.Epoch); err != nil {
			return fmt.Errorf("record acted epoch %d: %w", m.Epoch, err)
		}
		n.acted.Store(m.Epoch)
	}
	host := n.cfg.Host
	var errs []error
	for s, rs := range m.ShardReplicas {
		want := slices.Contains(rs, n.cfg.ID)
		switch local := host.Replica(s); {
		case want && local == nil:
			errs = append(errs, n.startReplica(m, s))
		case !want && local != nil:
			errs = append(errs, n.purge(ctx, m, s))
		}
	}
	return errors.Join(errs...)
}

// checkHostable reports why this node may host no replica of m: the
// cluster's hard settings differ from its data directory's (a new member's
// directory takes the cluster's shard count here), or the map
// knows another incarnation of this node id (its directory was wiped
// while it was in the cluster). Each reason is logged once, when it
// appears.
func (n *Runtime) checkHostable(m *topology.Map) error {
	set := n.cfg.Host.Settings()
	var err error
	if set.Shards == 0 && m.Slots == set.Slots {
		// A new member takes the cluster's shard count (HostConfig.Shards).
		err = n.cfg.Host.AdoptShards(m.Shards)
		set = n.cfg.Host.Settings()
	}
	info := m.Nodes[n.cfg.ID]
	switch {
	case err != nil:
	case m.Slots != set.Slots || m.Shards != set.Shards:
		err = fmt.Errorf("the cluster has %d slots and %d shards, this node's data directory %d and %d: hard settings must match (start this node with --slots %d --shards %d and an empty data directory)",
			m.Slots, m.Shards, set.Slots, set.Shards, m.Slots, m.Shards)
	case info.Incarnation != 0 && info.Incarnation != n.incarnation && info.State != topology.NodeRemoved:
		err = fmt.Errorf("the map knows node %s as incarnation %x, this data directory is incarnation %x: it was wiped while the node was in the cluster, so it hosts nothing; drain the node (gridnode drain --node %s --force) and it is admitted again, empty",
			n.cfg.ID, info.Incarnation, n.incarnation, n.cfg.ID)
	}
	n.mu.Lock()
	prev := n.settingsErr
	n.settingsErr = err
	n.mu.Unlock()
	if err != nil && prev != nil && prev.Error() == err.Error() {
		return errHostableLogged
	}
	return err
}

// errHostableLogged: checkHostable's refusal, logged already.
var errHostableLogged = errors.New("cluster: this node hosts no replica (logged)")

// startReplica starts this node's replica of shard s, which m gives it.
func (n *Runtime) startReplica(m *topology.Map, s int) error {
	host := n.cfg.Host
	boot := m.Created(s) && m.Nodes[n.cfg.ID].Incarnation == n.incarnation
	var err error
	if boot {
		var voters []raft.Server
		for _, id := range m.ShardReplicas[s] {
			voters = append(voters, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(m.Nodes[id].RaftAddr)})
		}
		_, err = host.BootstrapReplica(s, voters)
	} else {
		_, err = host.StartReplica(s, false)
	}
	if err != nil {
		return fmt.Errorf("start replica of shard %d: %w", s, err)
	}
	n.cfg.Logger.Info("replica started", "shard", s, "bootstrap", boot, "epoch", m.Epoch)
	return nil
}

// purge stops and deletes this node's replica of shard s, which the
// current map m no longer gives it, once the shard's leader (one of the
// replicas m lists) reports a committed configuration that does not list
// this node. Until then the replica keeps running: the map's removal
// follows the group's, and a group that still counts on this replica (a
// removal not committed, a map that is ahead of the group) keeps it.
func (n *Runtime) purge(ctx context.Context, m *topology.Map, s int) error {
	for _, id := range m.ShardReplicas[s] {
		cctx, cancel := context.WithTimeout(ctx, replicaAskTimeout)
		st, ok, err := n.cfg.Remote.ShardStatus(cctx, m.Nodes[id].GRPCAddr, s)
		cancel()
		if err != nil || !ok || st.RaftState != "Leader" {
			continue
		}
		if !st.ConfigCommitted || st.ConfigIndex == 0 || st.Role(n.cfg.ID) != "none" {
			return nil // still a member, or the change is not committed yet
		}
		if err := n.cfg.Host.StopReplica(s, true); err != nil {
			return fmt.Errorf("stop replica of shard %d: %w", s, err)
		}
		n.cfg.Logger.Info("replica removed", "shard", s, "epoch", m.Epoch, "group_config_index", st.ConfigIndex)
		return nil
	}
	return nil // no leader found: ask again next round
}

// SettingsError is set while this node may host no replica of the map:
// the cluster's hard settings differ from its data directory's, or the map
// knows another incarnation of this node (its directory was wiped while it
// was in the cluster).
func (n *Runtime) SettingsError() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.settingsErr
}
