package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/cluster/topology"
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
	ID topology.NodeID // required
	// Addresses gossiped to the others: the client gRPC address and the
	// HTTP address. The Raft address is the Mux's.
	GRPCAddr string // required
	HTTPAddr string
	// Host holds this node's shard replicas, on Mux; the runtime starts and
	// stops them. Its hard settings (slots, shards) become the cluster's at
	// bootstrap, and a node whose settings differ from the cluster's
	// refuses to host replicas.
	Host *shard.Host
	Mux  *raftlog.Mux
	// Logs holds the control group's Raft log (the node's log store).
	Logs *raftlog.Journal
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
	// GossipEncryption, if set, encrypts the gossip (MembershipConfig),
	// and GossipKeyringFile keeps its keyring as it changes.
	GossipEncryption  *GossipEncryption
	GossipKeyringFile string
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
	// ClockOffsets, if set, measures this node's clock against its
	// peers' over gossip (the host's shards are given it as their
	// PeerClocks).
	ClockOffsets *ClockOffsets
	Clock        func() time.Time
	Logger       *slog.Logger
}

// withDefaults is c with every unset field at its default: the one place
// the defaults of the runtime's config are.
func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = topology.DefaultGracePeriod
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
	return c
}

// Validate reports whether c, with its defaults, can start a runtime;
// errors wrap topology.ErrConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.ID.Validate(); err != nil {
		return fmt.Errorf("%w: %w", topology.ErrConfig, err)
	}
	switch {
	case c.GRPCAddr == "":
		return fmt.Errorf("%w: GRPCAddr is required", topology.ErrConfig)
	case c.Host == nil || c.Mux == nil || c.Logs == nil || c.Remote == nil:
		return fmt.Errorf("%w: Host, Mux, Logs and Remote are required", topology.ErrConfig)
	case c.SnapshotDir == "":
		return fmt.Errorf("%w: SnapshotDir is required", topology.ErrConfig)
	case c.BootstrapExpect < 0:
		return fmt.Errorf("%w: bootstrap-expect %d is negative", topology.ErrConfig, c.BootstrapExpect)
	case c.Replicas < 0 || c.Replicas > topology.MaxReplicas:
		return fmt.Errorf("%w: replicas %d out of range 1..%d", topology.ErrConfig, c.Replicas, topology.MaxReplicas)
	case c.GracePeriod < 0:
		return fmt.Errorf("%w: grace period %v is negative", topology.ErrConfig, c.GracePeriod)
	}
	return nil
}

// Runtime is the cluster runtime of one gridnode: its gossip membership, its
// member of the control group, the replica manager that starts and stops
// the local shard replicas the map assigns, and, while it leads the control
// group, the reconciler that keeps the map and the shard groups in line
// with the plan.
type Runtime struct {
	cfg   Config
	ms    *Membership
	ctl   *Control
	raft  *raft.Raft
	trans *raftlog.Transport
	store *raftlog.JournalGroup
	snaps raft.SnapshotStore

	wake chan struct{} // capacity 1: gossip changed, look again
	quit chan struct{}
	wg   sync.WaitGroup

	// incarnation is this node's data directory's (see NodeMeta).
	incarnation uint64
	// acted is the highest map epoch the replica loop has acted on, kept
	// in the control group's stable store (actedKey); only that loop
	// changes it.
	acted atomic.Uint64
	// replicaRounds counts the replica loop's rounds, admitRounds the
	// control leader's admission passes (tests follow the loops by them).
	replicaRounds, admitRounds atomic.Uint64
	// leadTerm is the control term in which this node, leading, applied a
	// barrier: its map is then the current one (CurrentEpoch). barrierMu
	// makes the callers that find it stale share one barrier (catchUp).
	leadTerm  atomic.Uint64
	barrierMu sync.Mutex
	barrier   *termBarrier
	// ready caches the replica loop's readiness verdict (Ready).
	ready atomic.Bool

	mu          sync.Mutex
	settingsErr error  // the map's hard settings differ from the host's
	notReady    string // why the node is not ready ("" when it is)
	// loggedOnce holds, per node, the incarnation a refusal to admit it
	// was last logged for: each is logged once.
	loggedOnce map[topology.NodeID]uint64
	closeOnce  sync.Once
}

// Keys of the control group's stable store that the runtime keeps beside
// Raft's own.
var (
	incarnationKey = []byte("grid.Incarnation")
	actedKey       = []byte("grid.ActedEpoch")
)

var _ interface {
	Self() topology.NodeID
	Map() *topology.Map
} = (*Runtime)(nil)

// Start joins (or forms) the cluster and starts the node's loops.
func Start(cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Runtime{cfg: cfg, ctl: NewControl(), wake: make(chan struct{}, 1), quit: make(chan struct{}), loggedOnce: map[topology.NodeID]uint64{}}
	if err := n.startControl(); err != nil {
		return nil, err
	}
	if err := n.loadIdentity(); err != nil {
		n.stopControl()
		return nil, err
	}
	n.resumeReplicas()
	ms, err := NewMembership(MembershipConfig{
		NodeID: cfg.ID, BindAddr: cfg.GossipListen, AdvertiseAddr: cfg.GossipAdvertise,
		Meta: topology.NodeMeta{ID: cfg.ID, GRPCAddr: cfg.GRPCAddr, RaftAddr: cfg.Mux.Addr().String(), HTTPAddr: cfg.HTTPAddr,
			Incarnation: n.incarnation},
		Logger: cfg.Logger, Timing: cfg.Gossip, Clock: cfg.Clock,
		Seeds: cfg.Join, Faults: cfg.GossipFaults, ClockOffsets: cfg.ClockOffsets, Encryption: cfg.GossipEncryption,
		KeyringFile: cfg.GossipKeyringFile,
		OnEvent:     func(Event) { n.poke() },
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

// raftLogger is the control group's Raft logger: the node's, at warn.
func (n *Runtime) raftLogger() hclog.Logger {
	return raftlog.RaftLogger(n.cfg.Logger, "raft").With("group", "control")
}

func (n *Runtime) startControl() error {
	cfg := n.cfg
	trans, err := raftlog.NewTransport(cfg.Mux, ControlGroup, raftlog.TransportConfig{})
	if err != nil {
		return err
	}
	snaps, err := raftlog.OpenSnapshots(cfg.SnapshotDir, ControlGroup, 2, n.raftLogger())
	if err != nil {
		_ = trans.Close()
		return err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	raftlog.SetTimeouts(rc, cfg.HeartbeatTimeout)
	rc.SnapshotThreshold = 1024
	rc.Logger = n.raftLogger()
	n.store = cfg.Logs.Group(ControlGroup)
	if err := raftlog.TrimLogBehindSnapshot(n.store, snaps); err != nil {
		_ = trans.Close()
		return fmt.Errorf("cluster: control group: %w", err)
	}
	r, err := raft.NewRaft(rc, n.ctl, n.store, n.store, snaps, trans)
	if err != nil {
		_ = trans.Close()
		return fmt.Errorf("cluster: control group: %w", err)
	}
	n.raft, n.trans, n.snaps = r, trans, snaps
	return nil
}

// loadIdentity reads this data directory's incarnation, making it at the
// first start, and the epoch the replica loop last acted on. Both live in
// the control group's stable store, which a wiped directory loses.
func (n *Runtime) loadIdentity() error {
	inc, err := n.store.GetUint64(incarnationKey)
	if errors.Is(err, raftlog.ErrKeyNotFound) {
		var b [8]byte
		for inc == 0 {
			if _, err := rand.Read(b[:]); err != nil {
				return fmt.Errorf("cluster: incarnation: %w", err)
			}
			inc = binary.BigEndian.Uint64(b[:])
		}
		err = n.store.SetUint64(incarnationKey, inc)
		n.cfg.Logger.Info("data directory incarnation created", "incarnation", fmt.Sprintf("%x", inc))
	}
	if err != nil {
		return fmt.Errorf("cluster: incarnation: %w", err)
	}
	acted, err := n.store.GetUint64(actedKey)
	if err != nil && !errors.Is(err, raftlog.ErrKeyNotFound) {
		return fmt.Errorf("cluster: acted epoch: %w", err)
	}
	n.incarnation = inc
	n.acted.Store(acted)
	return nil
}

// Incarnation is the id of this node's data directory (see NodeMeta).
func (n *Runtime) Incarnation() uint64 { return n.incarnation }

func (n *Runtime) stopControl() {
	if err := n.raft.Shutdown().Error(); err != nil {
		n.cfg.Logger.Warn("control group shutdown", "err", err)
	}
	_ = n.trans.Close()
}

// poke wakes the loops: gossip changed.
func (n *Runtime) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Self is this node's id.
func (n *Runtime) Self() topology.NodeID { return n.cfg.ID }

// Map returns a copy of the cluster map, or nil before bootstrap.
func (n *Runtime) Map() *topology.Map { return n.ctl.Map() }

// MapChanged returns a channel closed at the next change of the map.
func (n *Runtime) MapChanged() <-chan struct{} { return n.ctl.Changed() }

// Alive is the gossip view: the members seen alive, this node included.
func (n *Runtime) Alive() map[topology.NodeID]bool { return AliveSet(n.ms.Members()) }

// Members is the gossip view with every member's metadata.
func (n *Runtime) Members() []Member { return n.ms.Members() }

// GossipKeyring lists or changes this node's gossip keyring
// (Membership.GossipKeyring).
func (n *Runtime) GossipKeyring(action string, key []byte) ([][]byte, error) {
	return n.ms.GossipKeyring(action, key)
}

// SetGossipKeys rotates this node's gossip keys (Membership.SetGossipKeys).
func (n *Runtime) SetGossipKeys(keys [][]byte) error { return n.ms.SetGossipKeys(keys) }

// GossipAddr is the gossip address this node advertises.
func (n *Runtime) GossipAddr() string { return n.ms.Addr() }

// ControlLeader is the control group's leader as this node knows it.
func (n *Runtime) ControlLeader() topology.NodeID {
	_, id := n.raft.LeaderWithID()
	return topology.NodeID(id)
}

// ControlTerm is the latest term of the control group this node knows.
// Every node is a voter or non-voter of the control group, so it hears of
// each new term from the group's leader.
func (n *Runtime) ControlTerm() uint64 { return n.raft.CurrentTerm() }

// ControlState is this node's standing in the control group: leader,
// follower, candidate, nonvoter (a member that does not vote), none (not a
// member yet) or shutdown.
func (n *Runtime) ControlState() string {
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

// SettingsError is set while this node may host no replica of the map:
// the cluster's hard settings differ from its data directory's, or the map
// knows another incarnation of this node (its directory was wiped while it
// was in the cluster).
func (n *Runtime) SettingsError() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.settingsErr
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

// State is this node's state in its map (0 before it is in one).
func (n *Runtime) State() topology.NodeState {
	if m := n.Map(); m != nil {
		return m.Nodes[n.cfg.ID].State
	}
	return 0
}

// CurrentEpoch is the epoch of the current map, known only to the control
// group's leader once it has applied every entry committed before its
// term (a barrier, applied here if none has been in this term yet): it
// fails elsewhere. Other nodes ask the leader for it (Remote.ControlEpoch)
// before they act on their map, so the leader answers them by itself,
// whatever its own loops are busy with.
func (n *Runtime) CurrentEpoch(ctx context.Context) (uint64, error) {
	if err := n.catchUp(ctx); err != nil {
		return 0, err
	}
	m := n.ctl.Map()
	if m == nil {
		return 0, errors.New("no map yet")
	}
	if n.leadTerm.Load() != n.raft.CurrentTerm() {
		return 0, errors.New("this node's control leadership is changing")
	}
	return m.Epoch, nil
}

// catchUp makes sure this node, leading the control group, has applied a
// barrier in its current term: every entry committed before the term is
// then applied, and its map is the current one. Callers that find none
// share one barrier, which goes on when a caller's ctx ends. It fails
// with ErrNotControlLeader on a follower.
func (n *Runtime) catchUp(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("%w (leader: %q)", topology.ErrNotControlLeader, n.ControlLeader())
	}
	term := n.raft.CurrentTerm()
	if n.leadTerm.Load() == term {
		return nil
	}
	n.barrierMu.Lock()
	b := n.barrier
	if b == nil || b.term != term {
		select {
		case <-n.quit:
			n.barrierMu.Unlock()
			return fmt.Errorf("%w: the node is stopping", topology.ErrNotControlLeader)
		default:
		}
		b = &termBarrier{term: term, done: make(chan struct{})}
		n.barrier = b
		f := n.raft.Barrier(barrierTimeout)
		// Close waits for this goroutine before it shuts Raft down: a
		// future still queued for the FSM when Raft shuts down is never
		// answered (hashicorp/raft 1.7.2 drops them), while a running
		// Raft answers every one, by its commit or by the loss of the
		// leadership (within the leader lease when quorum is gone).
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			b.err = f.Error()
			if b.err == nil {
				n.leadTerm.Store(term)
			}
			close(b.done)
			n.barrierMu.Lock()
			if n.barrier == b && b.err != nil {
				n.barrier = nil // the next caller tries again
			}
			n.barrierMu.Unlock()
		}()
	}
	n.barrierMu.Unlock()
	select {
	case <-b.done:
		if b.err != nil {
			return fmt.Errorf("barrier: %w", b.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("barrier: %w", ctx.Err())
	}
}

// termBarrier is a barrier on its way in a control term (catchUp).
type termBarrier struct {
	term uint64
	done chan struct{}
	err  error // set before done is closed
}

// barrierTimeout bounds how long a barrier may wait to enter the log.
const barrierTimeout = 5 * time.Second

// Drain marks node id draining: the planner moves its replicas away, then
// the node is removed from the map. Only the control leader can. Unless
// force, it refuses (ErrUnderReplicated, wrapped with ErrRejected) to
// drain an active node when the other active nodes are fewer than the
// map's replica count: the shards could not keep their replicas.
func (n *Runtime) Drain(ctx context.Context, id topology.NodeID, force bool) (topology.DrainStatus, error) {
	if n.raft.State() != raft.Leader {
		return topology.DrainStatus{}, fmt.Errorf("%w (leader: %q)", topology.ErrNotControlLeader, n.ControlLeader())
	}
	m := n.Map()
	if m == nil {
		return topology.DrainStatus{}, fmt.Errorf("%w: cluster not bootstrapped yet", topology.ErrRejected)
	}
	if info, ok := m.Nodes[id]; !ok {
		return topology.DrainStatus{}, fmt.Errorf("%w: no node %q in the map", topology.ErrRejected, id)
	} else if info.State == topology.NodeActive {
		if left := activeNodes(m) - 1; !force && left < m.Replicas {
			return topology.DrainStatus{}, fmt.Errorf("%w: %w: draining %s leaves %d active nodes for %d replicas per shard, so every shard it holds would keep only %d; add a node first, or force the drain (gridnode drain --force)",
				topology.ErrRejected, topology.ErrUnderReplicated, id, left, m.Replicas, left)
		}
		if _, err := n.propose(ctx, topology.Command{Type: topology.CmdNodeDrain, ID: id}); err != nil {
			return topology.DrainStatus{}, err
		}
		n.poke()
	}
	m = n.Map()
	st := topology.DrainStatus{Node: id, State: m.Nodes[id].State, Epoch: m.Epoch}
	for _, set := range m.ShardReplicas {
		if slices.Contains(set, id) {
			st.ReplicasLeft++
		}
	}
	return st, nil
}

// activeNodes counts the map's active nodes.
func activeNodes(m *topology.Map) int {
	k := 0
	for _, info := range m.Nodes {
		if info.State == topology.NodeActive {
			k++
		}
	}
	return k
}

// propose commits cmd through the control group; it must lead.
func (n *Runtime) propose(ctx context.Context, cmd topology.Command) (uint64, error) {
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
			return 0, fmt.Errorf("%w: %w", topology.ErrNotControlLeader, err)
		}
		return 0, fmt.Errorf("cluster: propose %v: %w", cmd.Type, err)
	}
	res := f.Response().(ApplyResult)
	return res.Epoch, res.Err
}

// Leave tells the others this node leaves on purpose and hands the control
// group's leadership over if it holds it; for a clean shutdown, before the
// shard replicas are closed.
func (n *Runtime) Leave(timeout time.Duration) {
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
func (n *Runtime) Close() error {
	n.closeOnce.Do(func() {
		// Under barrierMu: catchUp starts no barrier once quit is closed
		// (n.wg must not grow while Close waits for it).
		n.barrierMu.Lock()
		close(n.quit)
		n.barrierMu.Unlock()
		n.wg.Wait()
		_ = n.ms.Shutdown()
		n.stopControl()
	})
	return nil
}

// bootstrapLoop bootstraps the control group once this node is one of
// the first BootstrapExpect met through gossip (Membership joins the Join
// addresses, and rejoins, by itself).
func (n *Runtime) bootstrapLoop() {
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
func (n *Runtime) tryBootstrap() (bool, error) {
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
	voters := ready[:topology.ControlVoters(len(ready))]
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
