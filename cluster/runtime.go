package cluster

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/shard"
)

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
	// GossipListen is where memberlist listens (gossip.DefaultAddr);
	// GossipAdvertise what it tells the others (default: the bound one).
	GossipListen    string
	GossipAdvertise string
	// Join lists gossip addresses of existing members; the node retries
	// them in the background until one answers, and again whenever a
	// member is not alive (gossip.Config.Seeds).
	Join []string
	// GossipFaults injects faults into the gossip traffic (tests only).
	GossipFaults *gossip.Faults
	// GossipEncryption, if set, encrypts the gossip (gossip.Config),
	// and GossipKeyringFile keeps its keyring as it changes.
	GossipEncryption  *gossip.Encryption
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
	Gossip      gossip.Timing
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
	// DiskStates, if set, is where the runtime keeps what gossip says of
	// the nodes' disks (the host's shards are given it as their
	// PeerDisks); default a private one.
	DiskStates *DiskStates
	Clock      func() time.Time
	Logger     *slog.Logger
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
	if c.DiskStates == nil {
		c.DiskStates = NewDiskStates()
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

// Runtime is the cluster runtime of one gridnode: its gossip membership
// (package gossip), its member of the control group (the controller:
// controller.go, bootstrap.go), the replica loop that starts and stops the
// local shard replicas the map assigns (replicas.go, ready.go), and, while
// it leads the control group, the reconciler that keeps the map and the
// shard groups in line with the plan (reconcile.go, execute.go).
type Runtime struct {
	cfg   Config
	ms    *gossip.Membership
	ctl   *Control    // the control group's FSM: the map
	disks *DiskStates // the nodes' disks, as gossiped (cfg.DiskStates)

	// The controller: the control group's Raft.
	raft  *raft.Raft
	trans *raftlog.Transport
	store *raftlog.JournalGroup
	snaps raft.SnapshotStore
	// leadTerm is the control term in which this node, leading, applied a
	// barrier: its map is then the current one (CurrentEpoch). barrierMu
	// makes the callers that find it stale share one barrier (catchUp).
	leadTerm  atomic.Uint64
	barrierMu sync.Mutex
	barrier   *termBarrier
	// admitRounds counts the control leader's admission passes (tests
	// follow the loop by it).
	admitRounds atomic.Uint64

	// The replica loop.
	// acted is the highest map epoch the replica loop has acted on, kept
	// in the control group's stable store (actedKey); only that loop
	// changes it.
	acted atomic.Uint64
	// replicaRounds counts the replica loop's rounds (tests follow the
	// loop by it).
	replicaRounds atomic.Uint64
	// ready caches the replica loop's readiness verdict (Ready).
	ready atomic.Bool

	// incarnation is this node's data directory's (see NodeMeta).
	incarnation uint64

	wake chan struct{} // capacity 1: gossip changed, look again
	quit chan struct{}
	wg   sync.WaitGroup

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
	n := &Runtime{cfg: cfg, ctl: NewControl(), disks: cfg.DiskStates, wake: make(chan struct{}, 1), quit: make(chan struct{}), loggedOnce: map[topology.NodeID]uint64{}}
	if err := n.startControl(); err != nil {
		return nil, err
	}
	if err := n.loadIdentity(); err != nil {
		n.stopControl()
		return nil, err
	}
	n.resumeReplicas()
	gc := gossip.Config{
		NodeID: cfg.ID, BindAddr: cfg.GossipListen, AdvertiseAddr: cfg.GossipAdvertise,
		Meta: topology.NodeMeta{ID: cfg.ID, GRPCAddr: cfg.GRPCAddr, RaftAddr: cfg.Mux.Addr().String(), HTTPAddr: cfg.HTTPAddr,
			Incarnation: n.incarnation},
		Logger: cfg.Logger, Timing: cfg.Gossip, Clock: cfg.Clock,
		Seeds: cfg.Join, Faults: cfg.GossipFaults, Encryption: cfg.GossipEncryption,
		KeyringFile: cfg.GossipKeyringFile,
		OnEvent: func(ev gossip.Event) {
			n.disks.observe(ev.Member)
			n.poke()
		},
	}
	if cfg.ClockOffsets != nil { // a nil *ClockOffsets is no ClockProbe
		gc.Clocks = cfg.ClockOffsets
	}
	ms, err := gossip.New(gc)
	if err == nil {
		err = ms.Start()
	}
	if err != nil {
		n.stopControl()
		return nil, err
	}
	n.ms = ms
	n.wg.Add(4)
	go n.bootstrapLoop()
	go n.replicaLoop()
	go n.controlLoop()
	go n.watchDisk()
	return n, nil
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
func (n *Runtime) Alive() map[topology.NodeID]bool { return gossip.AliveSet(n.ms.Members()) }

// Members is the gossip view with every member's metadata.
func (n *Runtime) Members() []gossip.Member { return n.ms.Members() }

// GossipKeyring lists or changes this node's gossip keyring
// (gossip.Membership.Keyring).
func (n *Runtime) GossipKeyring(action string, key []byte) ([][]byte, error) {
	return n.ms.Keyring(action, key)
}

// SetGossipKeys rotates this node's gossip keys (gossip.Membership.SetKeys).
func (n *Runtime) SetGossipKeys(keys [][]byte) error { return n.ms.SetKeys(keys) }

// GossipAddr is the gossip address this node advertises.
func (n *Runtime) GossipAddr() string { return n.ms.Addr() }

// RefusedGossipFrames counts the gossip packets and stream messages this
// node refused before memberlist decoded them
// (gossip.Membership.RefusedFrames).
func (n *Runtime) RefusedGossipFrames() uint64 { return n.ms.RefusedFrames() }

// UndecryptableGossip counts the gossip packets no key of this node's
// keyring opened (gossip.Membership.UndecryptableFrames).
func (n *Runtime) UndecryptableGossip() uint64 { return n.ms.UndecryptableFrames() }

// State is this node's state in its map (0 before it is in one).
func (n *Runtime) State() topology.NodeState {
	if m := n.Map(); m != nil {
		return m.Nodes[n.cfg.ID].State
	}
	return 0
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
