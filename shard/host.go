package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

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
	// Shards: zero means what the data directory holds, or DefaultShards
	// for a new one.
	Shards int
	// Soft settings.
	Clock        func() time.Time
	TickInterval time.Duration
	// NoSync skips fsync of the Raft log: tests and benchmarks only; an
	// acknowledged operation can then be lost on a crash.
	NoSync bool
	// HotWindow is how long settled records stay in the hot tier before
	// moving to the cold one; default 24 h.
	HotWindow time.Duration
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
	// Peers are the initial voters of every shard group that has no state
	// yet, each with its Mux address; empty means this node alone. Every
	// node bootstraps with the same list.
	Peers    []raft.Server
	Logger   *slog.Logger
	Registry prometheus.Registerer
}

// Host is the set of shards on one node and the slot map that routes digests
// to them. On a single node every shard is a one-voter group.
type Host struct {
	cfg      HostConfig
	settings HardSettings
	logs     *raftlog.Store
	cold     *tiering.Store
	shards   []*Shard
	metrics  *Metrics
}

// OpenHost opens (or creates) the node's data directory and starts its shards.
func OpenHost(cfg HostConfig) (*Host, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("shard: host config: DataDir is required")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "node-1"
	}
	if cfg.Slots == 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
		if stored, err := readSettings(cfg.DataDir); err == nil {
			cfg.Shards = stored.Shards
		}
	}
	if cfg.Shards < 1 || uint32(cfg.Shards) > cfg.Slots {
		return nil, fmt.Errorf("shard: host config: shards %d out of range 1..%d (slots)", cfg.Shards, cfg.Slots)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("shard: data dir: %w", err)
	}
	settings, err := loadOrCreateSettings(cfg.DataDir, HardSettings{Slots: cfg.Slots, Shards: cfg.Shards})
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	logs, err := raftlog.Open(filepath.Join(cfg.DataDir, "raft"), raftlog.Options{NoSync: cfg.NoSync, Logger: pebbleLogger{cfg.Logger}})
	if err != nil {
		return nil, err
	}
	cold, err := tiering.Open(filepath.Join(cfg.DataDir, "cold"), tiering.Options{FS: cfg.ColdFS, Logger: cfg.Logger})
	if err != nil {
		_ = logs.Close()
		return nil, err
	}
	h := &Host{cfg: cfg, settings: settings, logs: logs, cold: cold, metrics: NewMetrics(cfg.Registry)}
	// Shards restore their snapshots in parallel: a restart is as long as
	// the largest shard's restore, not the sum of all.
	h.shards = make([]*Shard, cfg.Shards)
	errs := make([]error, cfg.Shards)
	var wg sync.WaitGroup
	for i := range h.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.shards[i], errs[i] = h.openShard(i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		h.Close()
		return nil, err
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(newHostCollector(h))
	}
	return h, nil
}

// openShard starts the local replica of shard i, on the Mux when there is
// one.
func (h *Host) openShard(i int) (*Shard, error) {
	cfg := h.cfg
	var trans *raft.NetworkTransport
	if cfg.Mux != nil {
		t, err := raftlog.NewTransport(cfg.Mux, uint64(i), raftlog.TransportConfig{})
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		trans = t
	}
	scfg := Config{
		ID:           uint64(i),
		NodeID:       cfg.NodeID,
		SnapshotDir:  filepath.Join(cfg.DataDir, "snapshots"),
		Logs:         h.logs,
		Bootstrap:    true,
		Peers:        cfg.Peers,
		Cold:         h.cold.Shard(uint32(i)),
		HotWindow:    cfg.HotWindow,
		HotMaxBytes:  cfg.HotMaxBytes / int64(cfg.Shards),
		Clock:        cfg.Clock,
		TickInterval: cfg.TickInterval,
		Logger:       cfg.Logger,
		Metrics:      h.metrics,
	}
	if trans != nil {
		scfg.Transport = trans
	}
	s, err := Open(scfg)
	if err != nil && trans != nil {
		_ = trans.Close()
	}
	return s, err
}

// Settings returns the hard settings in force.
func (h *Host) Settings() HardSettings { return h.settings }

// NodeID is this node's id.
func (h *Host) NodeID() string { return h.cfg.NodeID }

// Shards returns the local shards, by id.
func (h *Host) Shards() []*Shard { return h.shards }

// SlotShard maps a slot to its shard id: contiguous slot ranges per shard.
func (h *Host) SlotShard(slot uint32) int {
	return int(uint64(slot) * uint64(h.settings.Shards) / uint64(h.settings.Slots))
}

// For returns the shard that owns digest d.
func (h *Host) For(d keyspace.Digest) *Shard {
	return h.shards[h.SlotShard(d.Slot(h.settings.Slots))]
}

// WaitReady blocks until every shard leads and serves reads, or ctx ends.
// It is for a node alone (no Mux): with peers, the leaders are spread.
func (h *Host) WaitReady(ctx context.Context) error {
	for _, s := range h.shards {
		if err := s.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Ready reports whether every shard serves.
func (h *Host) Ready() bool {
	for _, s := range h.shards {
		if !s.ready() {
			return false
		}
	}
	return true
}

// ColdHealth is the cold tier's unrecovered write error, if any: while it
// lasts, applies wait for the write to succeed.
func (h *Host) ColdHealth() error { return h.cold.Health() }

// Audit calls fn for the COMPLETED and POISONED records of namespace tag
// settled in [since, until) that the local cold tiers hold, shard by shard,
// oldest first within a shard, until fn returns false. It reads local state.
func (h *Host) Audit(tag uint16, since, until int64, fn func(shard uint32, d keyspace.Digest, r keyspace.ColdRecord) bool) error {
	return h.cold.Audit(tag, since, until, fn)
}

// Close stops every shard, then the cold tier and the log store.
func (h *Host) Close() error {
	var errs []error
	for _, s := range h.shards {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	errs = append(errs, h.cold.Close(), h.logs.Close())
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
