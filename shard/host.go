package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/dirlock"
	"github.com/l4xg/grid/internal/dirsync"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/tiering"
)

// HostConfig describes the set of shards a node hosts.
type HostConfig struct {
	NodeID  string // default "node-1"
	DataDir string // required
	// Hard settings, fixed at creation; zero means the defaults.
	Slots uint32
	// Shards: zero means what the data directory holds, or for a new one
	// DefaultShards (standalone, Mux nil) or, for a cluster member (Mux
	// set), the cluster's count: the host opens with no shard count
	// (Settings().Shards is 0, no replica can start) until AdoptShards
	// fixes the one of the cluster map.
	Shards int
	// Soft settings.
	Clock        func() time.Time
	TickInterval time.Duration
	// MaxClockOffset is the bound on clock offsets leases rely on
	// (gridnode serve --max-clock-offset); default
	// digest.DefaultMaxClockOffset. PeerClocks, if set, is the node's
	// measurement of its clock against its peers' (Config.PeerClocks).
	MaxClockOffset time.Duration
	PeerClocks     PeerClocks
	// PeerDisks, if set, tells which peers' disks are below their reserve
	// (Config.PeerDisks).
	PeerDisks PeerDisks
	// NoSync skips fsync of the Raft log: tests and benchmarks only; an
	// acknowledged operation can then be lost on a crash.
	NoSync bool
	// HotWindow is how long settled records stay in the hot tier before
	// moving to the cold one; default 24 h.
	HotWindow time.Duration
	// DiskReserve is the room (bytes available on the data directory's
	// file system) below which the node refuses new keys: see DiskRoom.
	// Zero means DefaultDiskReserve; negative, no reserve.
	DiskReserve int64
	// HotMaxBytes is the node's hot tier budget, split evenly over its
	// shards; 0 means none. Settled records beyond it move to the cold tier
	// early; records in flight always stay hot.
	HotMaxBytes int64
	// ColdFS, if set, is the file system of the cold tier (fault tests).
	ColdFS vfs.FS
	// Mux, if set, carries every shard's Raft traffic over the network, one
	// group per shard (group id = shard id); nil keeps each shard on an
	// in-memory transport, a one-voter group.
	Mux *raftlog.Mux
	// HeartbeatTimeout is every replica's Raft heartbeat timeout (its
	// election timeout and leader lease too: raftlog.SetTimeouts); zero means
	// Config's default, 500 ms. A failed leader is replaced after about one
	// to two of them.
	HeartbeatTimeout time.Duration
	// MaxInflight is every replica's Config.MaxInflight: the entries a
	// shard leader has on their way through Raft, 0 to MaxInflightLimit
	// (ValidateMaxInflight). Zero means Config's default.
	MaxInflight int
	// SnapshotTail is every replica's Config.SnapshotTail; zero means its
	// default.
	SnapshotTail time.Duration
	Logger       *slog.Logger
	Registry     prometheus.Registerer
}

// Host is the set of shard replicas on one node and the slot map that routes
// digests to shards. It hosts the replicas its owner starts (StartReplica,
// BootstrapReplica) and stops (StopReplica): every shard on a standalone
// node, the subset the cluster map gives the node in a cluster. Its
// methods are safe for concurrent use.
type Host struct {
	cfg HostConfig
	// settings are the hard settings in force; Shards is 0 while the count
	// is the cluster's and not yet known (AdoptShards).
	settings atomic.Pointer[HardSettings]
	lock     *dirlock.Lock // the data directory's, held until Close
	disk     *diskGuard
	logs     *raftlog.Journal
	cold     *tiering.Store
	metrics  *Metrics

	// mu guards replicas and closed. Every request reads replicas (For), so
	// mu is never held while a replica opens or closes; lifecycle is.
	mu       sync.RWMutex
	replicas []*Replica // by shard id; nil: not hosted here
	closed   bool
	// lifecycle serializes StartReplica and StopReplica of each shard id:
	// shard id takes lifecycle[id%len(lifecycle)]. A fixed set of stripes,
	// so that AdoptShards changes the shard count without moving a mutex;
	// Close and AdoptShards take all of them, in order.
	lifecycle [lifecycleStripes]sync.Mutex
}

// lifecycleStripes is the number of lifecycle mutexes: shards sharing one
// only start and stop one at a time.
const lifecycleStripes = 64

// life is the lifecycle mutex of shard id.
func (h *Host) life(id int) *sync.Mutex { return &h.lifecycle[id%lifecycleStripes] }

// lockLifecycles takes every lifecycle mutex, in order, and returns the
// function that releases them: no replica starts or stops in between.
func (h *Host) lockLifecycles() (unlock func()) {
	for i := range h.lifecycle {
		h.lifecycle[i].Lock()
	}
	return func() {
		for i := range h.lifecycle {
			h.lifecycle[i].Unlock()
		}
	}
}

// withDefaults is c with every unset field at its default: the one place
// the defaults of a host's config are. Shards defaults to the data
// directory's stored count, else DefaultShards standalone; a new cluster
// member's stays 0 (the cluster's, AdoptShards).
func (c HostConfig) withDefaults() HostConfig {
	if c.NodeID == "" {
		c.NodeID = "node-1"
	}
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.Shards == 0 && c.DataDir != "" {
		if stored, err := readSettings(c.DataDir); err == nil {
			c.Shards = stored.Shards
		}
	}
	if c.Shards == 0 && c.Mux == nil {
		c.Shards = DefaultShards
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxClockOffset == 0 {
		c.MaxClockOffset = digest.DefaultMaxClockOffset
	}
	if c.DiskReserve == 0 {
		c.DiskReserve = DefaultDiskReserve
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

// Validate reports whether c, with its defaults, can open a host.
func (c HostConfig) Validate() error {
	c = c.withDefaults()
	if c.DataDir == "" {
		return errors.New("shard: host config: DataDir is required")
	}
	if c.Shards == 0 && c.Mux != nil {
		// A new cluster member: the count is the cluster's (AdoptShards).
	} else if err := validShards(c.Shards, c.Slots); err != nil {
		return fmt.Errorf("shard: host config: %w", err)
	}
	if err := ValidateMaxClockOffset(c.MaxClockOffset); err != nil {
		return fmt.Errorf("shard: host config: %w", err)
	}
	return nil
}

// OpenHost opens (or creates) the node's data directory: its hard
// settings, Raft log store and cold tier. It starts no replica; the caller
// starts those it hosts.
func OpenHost(cfg HostConfig) (*Host, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := dirsync.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("shard: data dir: %w", err)
	}
	// Nothing in the directory is read or written before it is ours: a
	// second node started on it by mistake stops here, told whose it is.
	lock, err := dirlock.Acquire(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("shard: data dir: %w", err)
	}
	h, err := openHostLocked(cfg)
	if err != nil {
		return nil, errors.Join(err, lock.Close())
	}
	h.lock = lock
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(newHostCollector(h))
	}
	return h, nil
}

// openHostLocked opens the data directory's storage, once it is locked.
// A new cluster member's directory gets its hard settings when it adopts
// the cluster's shard count (AdoptShards), not here: a directory with shard
// state always holds the settings it was made with.
func openHostLocked(cfg HostConfig) (*Host, error) {
	settings := HardSettings{Format: formatVersion, Digest: digestName, Slots: cfg.Slots}
	if cfg.Shards != 0 {
		var err error
		if settings, err = loadOrCreateSettings(cfg.DataDir, HardSettings{Slots: cfg.Slots, Shards: cfg.Shards}); err != nil {
			return nil, err
		}
	}
	logs, err := raftlog.OpenJournalFrom(filepath.Join(cfg.DataDir, "journal"), filepath.Join(cfg.DataDir, "raft"), raftlog.JournalOptions{NoSync: cfg.NoSync, Logger: pebbleLogger{cfg.Logger}})
	if err != nil {
		return nil, err
	}
	cold, err := tiering.Open(filepath.Join(cfg.DataDir, "cold"), tiering.Options{FS: cfg.ColdFS, Logger: cfg.Logger})
	if err != nil {
		_ = logs.Close()
		return nil, err
	}
	h := &Host{cfg: cfg, logs: logs, cold: cold, metrics: NewMetrics(cfg.Registry),
		disk:     newDiskGuard(cfg.DataDir, cfg.DiskReserve),
		replicas: make([]*Replica, settings.Shards)}
	h.settings.Store(&settings)
	return h, nil
}

// AdoptShards fixes the shard count of a new cluster member's data
// directory, opened without one (HostConfig.Shards), at the cluster's:
// it writes the directory's hard settings, after which replicas can
// start. With the count fixed already it does nothing when shards is that
// count, and fails wrapping ErrHardSettings when it is not.
func (h *Host) AdoptShards(shards int) error {
	defer h.lockLifecycles()()
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := *h.settings.Load()
	if err := validShards(shards, cur.Slots); err != nil {
		return fmt.Errorf("shard: adopt shard count: %w", err)
	}
	switch {
	case h.closed:
		return fmt.Errorf("shard: adopt shard count: %w", ErrClosed)
	case cur.Shards == shards:
		return nil
	case cur.Shards != 0:
		return fmt.Errorf("%w: this data directory has %d shards, the cluster %d", ErrHardSettings, cur.Shards, shards)
	}
	set, err := loadOrCreateSettings(h.cfg.DataDir, HardSettings{Slots: cur.Slots, Shards: shards})
	if err != nil {
		return err
	}
	h.replicas = make([]*Replica, set.Shards)
	h.settings.Store(&set)
	h.cfg.Logger.Info("shard count adopted from the cluster", "shards", set.Shards)
	return nil
}

// validShards reports whether shards is a usable shard count with slots
// slots: each shard owns at least one slot, and a fencing token has room
// for its id.
func validShards(shards int, slots uint32) error {
	if shards < 1 || uint32(shards) > slots || shards > 1<<digest.MaxTokenBits {
		return fmt.Errorf("shards %d out of range 1..min(%d (slots), %d (tokens name the shard))", shards, slots, 1<<digest.MaxTokenBits)
	}
	return nil
}

// DiskRoom returns nil when cmds may be proposed on this node, and an
// error wrapping ErrDiskFull when they hold a Reserve while the data
// directory's file system has less room than the disk reserve. Refusing
// new keys at admission keeps the disk from filling under the node:
// settles, releases, reads and Raft's own writes (terms, votes,
// compactions) go on in the room the reserve keeps, and new keys are taken
// again as soon as space is freed. The room is measured at most every
// 250 ms.
func (h *Host) DiskRoom(cmds []keyspace.Command) error { return h.disk.room(cmds) }

// DiskFull returns nil while this node's data directory has at least the
// disk reserve's room, and an error wrapping ErrDiskFull while it has
// less: the state DiskRoom refuses new keys in, which the node's shard
// leaders hand their leadership away in (Config.DiskFull) and the cluster
// gossips (cluster.DiskStates).
func (h *Host) DiskFull() error { return h.disk.full() }

// SetTierPolicy changes the hot window and the node's hot tier budget
// (HostConfig.HotWindow, HotMaxBytes) while the host runs: the shards this
// node leads carry the new policy in their next tick entries, and replicas
// opened later start with it. The values are validated as HostConfig's.
func (h *Host) SetTierPolicy(hotWindow time.Duration, hotMaxBytes int64) error {
	if hotWindow <= 0 || hotMaxBytes < 0 {
		return fmt.Errorf("shard: hot window %v must be positive and hot budget %d not negative", hotWindow, hotMaxBytes)
	}
	h.mu.Lock()
	h.cfg.HotWindow, h.cfg.HotMaxBytes = hotWindow, hotMaxBytes
	replicas := make([]*Replica, 0, len(h.replicas))
	for _, r := range h.replicas {
		if r != nil {
			replicas = append(replicas, r)
		}
	}
	h.mu.Unlock()
	for _, r := range replicas {
		r.prop.setPolicy(keyspace.TierPolicy{HotWindow: hotWindow.Milliseconds(), HotMaxBytes: hotMaxBytes / int64(max(h.Settings().Shards, 1))})
	}
	return nil
}

// Settings returns the hard settings in force. Shards is 0 on a new
// cluster member until it adopts the cluster's count (AdoptShards).
func (h *Host) Settings() HardSettings { return *h.settings.Load() }

// Logs is the node's Raft log store. The cluster runtime keeps its control
// group there too, under a group id no shard uses; the host closes it.
func (h *Host) Logs() *raftlog.Journal { return h.logs }

// NodeID is this node's id.
func (h *Host) NodeID() string { return h.cfg.NodeID }

// Replicas returns the replicas hosted here, by shard id, in a fresh slice.
// A replica may be stopped (StopReplica) while the caller holds it; its
// methods then fail with ErrClosed.
func (h *Host) Replicas() []*Replica {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]*Replica, 0, len(h.replicas))
	for _, s := range h.replicas {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Replica returns the replica of shard id hosted here, or nil when there is
// none (or id is out of range).
func (h *Host) Replica(id int) *Replica {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if id < 0 || id >= len(h.replicas) {
		return nil
	}
	return h.replicas[id]
}

// ShardOf is the id of the shard that owns digest d (digest.Digest.Shard).
func (h *Host) ShardOf(d digest.Digest) int {
	set := h.settings.Load()
	return d.Shard(set.Slots, set.Shards)
}

// For returns the replica of the shard that owns digest d, or nil when this
// node hosts no replica of it (the cluster map places it elsewhere, or
// its replica was not started or was stopped).
func (h *Host) For(d digest.Digest) *Replica {
	return h.Replica(h.ShardOf(d))
}

// WaitReady blocks until every hosted replica leads and serves reads, or
// ctx ends. It is for a node alone (no Mux): in a cluster, the leaders are
// spread.
func (h *Host) WaitReady(ctx context.Context) error {
	for _, s := range h.Replicas() {
		if err := s.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Ready reports whether every hosted replica leads and serves: the
// readiness of a node alone. It is true when none is hosted.
func (h *Host) Ready() bool {
	for _, s := range h.Replicas() {
		if !s.ready() {
			return false
		}
	}
	return true
}

// HasLeader reports whether every hosted replica knows a leader of its
// group (itself or another node): the readiness of a node in a cluster. It
// is true when none is hosted.
func (h *Host) HasLeader() bool {
	for _, s := range h.Replicas() {
		if id, _ := s.Leader(); id == "" {
			return false
		}
	}
	return true
}

// MaxClockOffset is the bound on clock offsets in force.
func (h *Host) MaxClockOffset() time.Duration { return h.cfg.MaxClockOffset }

// Clock is the node's clock, the one that stamps its entries.
func (h *Host) Clock() time.Time { return h.cfg.Clock() }

// ShardsBehindStamps lists the shards this node leads whose stamps are
// ahead of its clock by more than the maximum offset: they grant no lease
// until its clock gets there (or the leadership moves to a node whose
// clock does).
func (h *Host) ShardsBehindStamps() []int {
	var out []int
	for _, s := range h.Replicas() {
		if s.raft.State() == raft.Leader && s.StampLag() > s.cfg.MaxClockOffset {
			out = append(out, int(s.cfg.ID))
		}
	}
	return out
}

// ColdHealth is the cold tier's unrecovered write error, if any: while it
// lasts, applies wait for the write to succeed.
func (h *Host) ColdHealth() error { return h.cold.Health() }

// Audit calls fn for the COMPLETED and POISONED records of namespace tag
// settled in [since, until) that the local cold tiers hold, shard by shard,
// oldest first within a shard, until fn returns false. It reads local state.
func (h *Host) Audit(tag uint16, since, until int64, fn func(shard uint32, d digest.Digest, r keyspace.ColdRecord) bool) error {
	return h.cold.Audit(tag, since, until, fn)
}

// Close stops every hosted replica (a leader hands its group over first),
// then the cold tier and the log store. Later calls do nothing.
func (h *Host) Close() error {
	defer h.lockLifecycles()()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	replicas := h.replicas
	h.replicas = make([]*Replica, len(replicas))
	h.mu.Unlock()

	var errs []error
	for _, s := range replicas {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	errs = append(errs, h.cold.Close(), h.logs.Close(), h.lock.Close())
	return errors.Join(errs...)
}

// pebbleLogger routes Pebble's log lines to slog: routine lines at debug.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Debug(fmt.Sprintf(format, args...)) }

func (p pebbleLogger) Errorf(format string, args ...any) { p.l.Error(fmt.Sprintf(format, args...)) }

// Fatalf is called by Pebble on unrecoverable storage errors; it must not return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic("pebble: " + msg)
}
