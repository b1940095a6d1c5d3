package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/shard"
)

// ControlGroup is the Raft group id of the control group on every node's
// Mux and log store; shard groups use ids below MaxShards.
const ControlGroup uint64 = 1 << 40

// DefaultReplicas is the replica count of a shard in a cluster.
const DefaultReplicas = 3

// Config describes one node of a cluster. Zero values take defaults where
// noted.
type Config struct {
	ID NodeID // required
	// Addresses gossiped to the others: the client gRPC address and the
	// HTTP address. The Raft address is the Mux's.
	GRPCAddr string // required
	HTTPAddr string
	// Host holds this node's shard replicas; it must be in Manual mode on
	// Mux. Its hard settings (slots, shards) become the cluster's at
	// bootstrap, and a node whose settings differ from the cluster's
	// refuses to host replicas.
	Host *shard.Host
	Mux  *raftlog.Mux
	// Logs holds the control group's Raft log (the node's log store).
	Logs *raftlog.Store
	// SnapshotDir holds the control group's snapshots.
	SnapshotDir string
	// GossipListen is where memberlist listens (DefaultGossipAddr);
	// GossipAdvertise what it tells the others (default: the bound one).
	GossipListen    string
	GossipAdvertise string
	// Join lists gossip addresses of existing members; the node retries
	// them in the background until one answers, and again whenever a
	// member is not alive (MembershipConfig.Seeds).
	Join []string
	// GossipFaults injects faults into the gossip traffic (tests only).
	GossipFaults *GossipFaults
	// BootstrapExpect: a new cluster forms once this many nodes have met
	// through gossip. 0 means this node never bootstraps a cluster; it
	// waits to be added to an existing one.
	BootstrapExpect int
	// Replicas per shard, fixed at bootstrap; default DefaultReplicas
	// (fewer while the cluster has fewer nodes).
	Replicas int
	// GracePeriod a node may be missing before its replicas are replaced;
	// default DefaultGracePeriod.
	GracePeriod time.Duration
	Gossip      GossipTiming
	// HeartbeatTimeout of the control group's Raft; default 500 ms.
	HeartbeatTimeout time.Duration
	// ReconcileInterval is how often the control leader looks again when
	// nothing wakes it; default 500 ms.
	ReconcileInterval time.Duration
	// Remote reaches the other nodes' shard replicas (package api).
	Remote Remote
	Clock  func() time.Time
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if err := c.ID.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch {
	case c.GRPCAddr == "":
		return fmt.Errorf("%w: GRPCAddr is required", ErrConfig)
	case c.Host == nil || c.Mux == nil || c.Logs == nil || c.Remote == nil:
		return fmt.Errorf("%w: Host, Mux, Logs and Remote are required", ErrConfig)
	case c.SnapshotDir == "":
		return fmt.Errorf("%w: SnapshotDir is required", ErrConfig)
	case c.BootstrapExpect < 0:
		return fmt.Errorf("%w: bootstrap-expect %d is negative", ErrConfig, c.BootstrapExpect)
	case c.Replicas < 0 || c.Replicas > MaxReplicas:
		return fmt.Errorf("%w: replicas %d out of range 1..%d", ErrConfig, c.Replicas, MaxReplicas)
	case c.GracePeriod < 0:
		return fmt.Errorf("%w: grace period %v is negative", ErrConfig, c.GracePeriod)
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = 500 * time.Millisecond
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = 500 * time.Millisecond
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Node is the cluster runtime of one gridnode: its gossip membership, its
// member of the control group, the replica manager that starts and stops
// the local shard replicas the map assigns, and, while it leads the control
// group, the reconciler that keeps the map and the shard groups in line
// with the plan.
type Node struct {
	cfg   Config
	ms    *Membership
	ctl   *Control
	raft  *raft.Raft
	trans *raft.NetworkTransport
	store *raftlog.GroupStore
	snaps raft.SnapshotStore

	wake chan struct{} // capacity 1: gossip changed, look again
	quit chan struct{}
	wg   sync.WaitGroup

	mu          sync.Mutex
	settingsErr error // the map's hard settings differ from the host's
	closeOnce   sync.Once
}

var _ interface {
	Self() NodeID
	Map() *Map
} = (*Node)(nil)

// Start joins (or forms) the cluster and starts the node's loops.
func Start(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, ctl: NewControl(), wake: make(chan struct{}, 1), quit: make(chan struct{})}
	if err := n.startControl(); err != nil {
		return nil, err
	}
	ms, err := NewMembership(MembershipConfig{
		NodeID: cfg.ID, BindAddr: cfg.GossipListen, AdvertiseAddr: cfg.GossipAdvertise,
		Meta:   NodeMeta{ID: cfg.ID, GRPCAddr: cfg.GRPCAddr, RaftAddr: cfg.Mux.Addr().String(), HTTPAddr: cfg.HTTPAddr},
		Logger: cfg.Logger, Timing: cfg.Gossip, Clock: cfg.Clock,
		Seeds: cfg.Join, Faults: cfg.GossipFaults,
		OnEvent: func(Event) { n.poke() },
	})
	if err == nil {
		err = ms.Start()
	}
	if err != nil {
		n.stopControl()
		return nil, err
	}
	n.ms = ms
	n.wg.Add(3)
	go n.bootstrapLoop()
	go n.replicaLoop()
	go n.controlLoop()
	return n, nil
}

func (n *Node) startControl() error {
	cfg := n.cfg
	trans, err := raftlog.NewTransport(cfg.Mux, ControlGroup, raftlog.TransportConfig{})
	if err != nil {
		return err
	}
	snaps, err := raftlog.NewSnapshotStore(cfg.SnapshotDir, ControlGroup, 2, io.Discard)
	if err != nil {
		_ = trans.Close()
		return err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.HeartbeatTimeout
	rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	rc.SnapshotThreshold = 1024
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft-control", Level: hclog.Warn, Output: io.Discard})
	n.store = cfg.Logs.Group(ControlGroup)
	r, err := raft.NewRaft(rc, n.ctl, n.store, n.store, snaps, trans)
	if err != nil {
		_ = trans.Close()
		return fmt.Errorf("cluster: control group: %w", err)
	}
	n.raft, n.trans, n.snaps = r, trans, snaps
	return nil
}

func (n *Node) stopControl() {
	if err := n.raft.Shutdown().Error(); err != nil {
		n.cfg.Logger.Warn("control group shutdown", "err", err)
	}
	_ = n.trans.Close()
}

// poke wakes the loops: gossip changed.
func (n *Node) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Self is this node's id.
func (n *Node) Self() NodeID { return n.cfg.ID }

// Map returns a copy of the cluster map, or nil before bootstrap.
func (n *Node) Map() *Map { return n.ctl.Map() }

// MapChanged returns a channel closed at the next change of the map.
func (n *Node) MapChanged() <-chan struct{} { return n.ctl.Changed() }

// Alive is the gossip view: the members seen alive, this node included.
func (n *Node) Alive() map[NodeID]bool { return AliveSet(n.ms.Members()) }

// Members is the gossip view with every member's metadata.
func (n *Node) Members() []Member { return n.ms.Members() }

// GossipAddr is the gossip address this node advertises.
func (n *Node) GossipAddr() string { return n.ms.Addr() }

// ControlLeader is the control group's leader as this node knows it.
func (n *Node) ControlLeader() NodeID {
	_, id := n.raft.LeaderWithID()
	return NodeID(id)
}

// ControlState is this node's standing in the control group: leader,
// follower, candidate, nonvoter (a member that does not vote), none (not a
// member yet) or shutdown.
func (n *Node) ControlState() string {
	st := n.raft.State()
	if st == raft.Follower {
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			return "unknown"
		}
		for _, s := range f.Configuration().Servers {
			if s.ID == raft.ServerID(n.cfg.ID) {
				if s.Suffrage != raft.Voter {
					return "nonvoter"
				}
				return "follower"
			}
		}
		return "none"
	}
	return map[raft.RaftState]string{raft.Leader: "leader", raft.Candidate: "candidate", raft.Shutdown: "shutdown"}[st]
}

// SettingsError is set while the cluster's hard settings differ from this
// node's data directory: it then hosts no replica.
func (n *Node) SettingsError() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.settingsErr
}

// Ready reports whether this node has the map and every replica the map
// gives it runs and knows its leader.
func (n *Node) Ready() bool {
	m := n.Map()
	if m == nil || n.SettingsError() != nil {
		return false
	}
	for s, set := range m.ShardReplicas {
		if slices.Contains(set, n.cfg.ID) && n.cfg.Host.Shard(s) == nil {
			return false
		}
	}
	return n.cfg.Host.HasLeader()
}

// Drain marks node id draining: the planner moves its replicas away, then
// the node is removed from the map. Only the control leader can.
func (n *Node) Drain(ctx context.Context, id NodeID) (DrainStatus, error) {
	if n.raft.State() != raft.Leader {
		return DrainStatus{}, fmt.Errorf("%w (leader: %q)", ErrNotControlLeader, n.ControlLeader())
	}
	m := n.Map()
	if m == nil {
		return DrainStatus{}, fmt.Errorf("%w: cluster not bootstrapped yet", ErrRejected)
	}
	if info, ok := m.Nodes[id]; !ok {
		return DrainStatus{}, fmt.Errorf("%w: no node %q in the map", ErrRejected, id)
	} else if info.State == NodeActive {
		if _, err := n.propose(ctx, Command{Type: CmdNodeDrain, ID: id}); err != nil {
			return DrainStatus{}, err
		}
		n.poke()
	}
	m = n.Map()
	st := DrainStatus{Node: id, State: m.Nodes[id].State, Epoch: m.Epoch}
	for _, set := range m.ShardReplicas {
		if slices.Contains(set, id) {
			st.ReplicasLeft++
		}
	}
	return st, nil
}

// propose commits cmd through the control group; it must lead.
func (n *Node) propose(ctx context.Context, cmd Command) (uint64, error) {
	b, err := cmd.MarshalBinary()
	if err != nil {
		return 0, err
	}
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	f := n.raft.Apply(b, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, fmt.Errorf("%w: %w", ErrNotControlLeader, err)
		}
		return 0, fmt.Errorf("cluster: propose %v: %w", cmd.Type, err)
	}
	res := f.Response().(ApplyResult)
	return res.Epoch, res.Err
}

// Leave tells the others this node leaves on purpose and hands the control
// group's leadership over if it holds it; for a clean shutdown, before the
// shard replicas are closed.
func (n *Node) Leave(timeout time.Duration) {
	if n.raft.State() == raft.Leader {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.cfg.Logger.Info("control leadership transfer failed", "err", err)
		}
	}
	if err := n.ms.Leave(timeout); err != nil {
		n.cfg.Logger.Info("gossip leave", "err", err)
	}
}

// Close stops the loops, gossip and the control group's Raft. The shard
// replicas belong to the Host, which the caller closes afterwards.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.quit)
		n.wg.Wait()
		_ = n.ms.Shutdown()
		n.stopControl()
	})
	return nil
}

// bootstrapLoop bootstraps the control group once this node is one of
// the first BootstrapExpect met through gossip (Membership joins the Join
// addresses, and rejoins, by itself).
func (n *Node) bootstrapLoop() {
	defer n.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		done, err := n.tryBootstrap()
		if err != nil {
			n.cfg.Logger.Warn("bootstrap", "err", err)
		}
		if done {
			return
		}
		select {
		case <-n.quit:
			return
		case <-t.C:
		}
	}
}

// tryBootstrap forms the control group once BootstrapExpect nodes are
// alive in gossip: the first min(3, N) of them by id are its voters
// (1 voter for fewer than 3 nodes), and each of those bootstraps the group
// with that same configuration, which Raft accepts from every voter. It
// reports done when there is nothing left to do: the group has state
// already, or this node does not bootstrap.
func (n *Node) tryBootstrap() (bool, error) {
	if n.cfg.BootstrapExpect == 0 {
		return true, nil
	}
	has, err := raft.HasExistingState(n.store, n.store, n.snaps)
	if err != nil || has {
		return true, err
	}
	var ready []Member
	for _, m := range n.ms.Members() {
		if m.State == MemberAlive && m.MetaErr == nil && m.Meta.RaftAddr != "" {
			ready = append(ready, m)
		}
	}
	if len(ready) < n.cfg.BootstrapExpect {
		return false, nil
	}
	ready = ready[:n.cfg.BootstrapExpect] // sorted by id
	voters := ready[:controlVoters(len(ready))]
	var conf raft.Configuration
	self := false
	for _, m := range voters {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Meta.RaftAddr)})
		self = self || m.ID == n.cfg.ID
	}
	if !self {
		return true, nil // a voter adds this node
	}
	n.cfg.Logger.Info("bootstrapping the control group", "voters", len(conf.Servers))
	if err := n.raft.BootstrapCluster(conf).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return false, err
	}
	return true, nil
}

// controlVoters is the control group's voter count for a cluster of
// active nodes: 1 below 3 nodes, then 3.
func controlVoters(active int) int {
	if active < 3 {
		return 1
	}
	return 3
}
