package shard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/dirsync"
	"github.com/l4xg/grid/raftlog"
)

// StartReplica starts the local replica of shard id and returns it; if it
// already runs, it returns the running one. The replica uses the Mux (group
// id = shard id, this node's NodeID as Raft server id, the Mux address as
// Raft address), or an in-memory transport on a node alone.
//
// With bootstrap and no Raft state on disk, the group is created with this
// node as its only voter. Without bootstrap a replica with no state starts with no configuration
// and waits for a leader to add it (AddNonvoter, AddVoter). A replica with
// state resumes from it either way.
//
// Starts and stops of the same id are serialized; requests for other
// shards are never held up by them.
func (h *Host) StartReplica(id int, bootstrap bool) (*Replica, error) {
	return h.startReplica(id, bootstrap, nil)
}

// BootstrapReplica starts the local replica of shard id as StartReplica
// does, and with no Raft state on disk creates the group with voters as
// its configuration (each with its Mux address; this node among them).
// Every initial voter of a group must bootstrap it with the same voters:
// Raft accepts that configuration from each of them, and from no other.
// A replica with state resumes from it.
func (h *Host) BootstrapReplica(id int, voters []raft.Server) (*Replica, error) {
	if len(voters) == 0 {
		return nil, fmt.Errorf("shard %d: bootstrap replica: no voters", id)
	}
	return h.startReplica(id, true, voters)
}

// HasState reports whether the replica of shard id has Raft state on disk
// here (a log, a term or a snapshot) that a start would resume, with no
// purge of it pending.
func (h *Host) HasState(id int) (bool, error) {
	if err := h.checkID(id); err != nil {
		return false, err
	}
	h.life(id).Lock()
	defer h.life(id).Unlock()
	if _, err := os.Stat(h.purgeMarker(id)); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("shard %d: %w", id, err)
	}
	g := h.logs.Group(uint64(id))
	snaps, err := raftlog.OpenSnapshots(h.snapshotDir(), uint64(id), 2, nil)
	if err != nil {
		return false, fmt.Errorf("shard %d: %w", id, err)
	}
	has, err := raft.HasExistingState(g, g, snaps)
	if err != nil {
		return false, fmt.Errorf("shard %d: %w", id, err)
	}
	return has, nil
}

func (h *Host) startReplica(id int, bootstrap bool, voters []raft.Server) (*Replica, error) {
	if err := h.checkID(id); err != nil {
		return nil, err
	}
	h.life(id).Lock()
	defer h.life(id).Unlock()
	h.mu.RLock()
	s, closed := h.replicas[id], h.closed
	h.mu.RUnlock()
	if closed {
		return nil, fmt.Errorf("shard %d: start replica: %w", id, ErrClosed)
	}
	if s != nil {
		return s, nil
	}
	s, err := h.openReplica(id, bootstrap, voters)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.replicas[id] = s
	h.mu.Unlock()
	return s, nil
}

// StopReplica closes the local replica of shard id; it does nothing if none
// runs. Without purge the replica's state stays on disk and a later
// StartReplica resumes from it; a leader hands its group over first, as at
// Close. With purge the replica was removed from its group: it closes
// without a hand-over, and all its state is deleted (its Raft log and
// stable store, its snapshots and their cold sstable files, its cold tier
// records) so that a later StartReplica begins empty. Purge deletes the
// state of a replica that is not running too (leftovers from before a
// restart). A purge interrupted by a crash is finished by the next start.
func (h *Host) StopReplica(id int, purge bool) error {
	if err := h.checkID(id); err != nil {
		return err
	}
	h.life(id).Lock()
	defer h.life(id).Unlock()
	h.mu.Lock()
	s, closed := h.replicas[id], h.closed
	h.replicas[id] = nil
	h.mu.Unlock()
	if closed {
		return fmt.Errorf("shard %d: stop replica: %w", id, ErrClosed)
	}
	if s != nil {
		if err := s.close(!purge); err != nil {
			return fmt.Errorf("shard %d: stop replica: %w", id, err)
		}
	}
	if purge {
		return h.purge(id)
	}
	return nil
}

func (h *Host) checkID(id int) error {
	n := h.Settings().Shards
	if n == 0 {
		return fmt.Errorf("%w: shard %d: this new cluster member has not adopted the cluster's shard count yet", ErrNoSuchShard, id)
	}
	if id < 0 || id >= n {
		return fmt.Errorf("%w: shard %d: ids are 0..%d", ErrNoSuchShard, id, n-1)
	}
	return nil
}

// openReplica opens the local replica of shard i, on the Mux when there is
// one, after finishing an interrupted purge of it. A bootstrap creates the
// group with voters, or this node alone when nil.
func (h *Host) openReplica(i int, bootstrap bool, voters []raft.Server) (*Replica, error) {
	if _, err := os.Stat(h.purgeMarker(i)); err == nil {
		if err := h.purge(i); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("shard %d: %w", i, err)
	}
	h.mu.RLock()
	cfg := h.cfg
	h.mu.RUnlock()
	shards := h.Settings().Shards
	tokens, err := digest.NewTokenLayout(i, shards)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", i, err)
	}
	var trans *raftlog.Transport
	if cfg.Mux != nil {
		t, err := raftlog.NewTransport(cfg.Mux, uint64(i), raftlog.TransportConfig{OnReplicate: h.metrics.observeReplication})
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		trans = t
	}
	scfg := Config{
		ID:               uint64(i),
		NodeID:           cfg.NodeID,
		SnapshotDir:      h.snapshotDir(),
		Logs:             h.logs,
		Bootstrap:        bootstrap,
		Peers:            voters,
		Cold:             h.cold.Shard(uint32(i)),
		HotWindow:        cfg.HotWindow,
		HotMaxBytes:      cfg.HotMaxBytes / int64(shards),
		Tokens:           tokens,
		Clock:            cfg.Clock,
		MaxClockOffset:   cfg.MaxClockOffset,
		PeerClocks:       cfg.PeerClocks,
		DiskFull:         h.disk.full,
		PeerDisks:        cfg.PeerDisks,
		TickInterval:     cfg.TickInterval,
		HeartbeatTimeout: cfg.HeartbeatTimeout,
		MaxInflight:      cfg.MaxInflight,
		SnapshotTail:     cfg.SnapshotTail,
		Logger:           cfg.Logger,
		Metrics:          h.metrics,
	}
	if trans != nil {
		scfg.Transport, scfg.Stopping = trans, cfg.Mux.Stopping
	}
	s, err := Open(scfg)
	if err != nil && trans != nil {
		_ = trans.Close()
	}
	return s, err
}

func (h *Host) snapshotDir() string { return filepath.Join(h.cfg.DataDir, "snapshots") }

// purgeMarker is the file that says a purge of shard i has begun and not
// finished.
func (h *Host) purgeMarker(i int) string {
	return filepath.Join(h.cfg.DataDir, "purging-shard-"+strconv.Itoa(i))
}

// purge deletes the state of shard i's replica, which must not run. A
// marker file, synced before and removed after, makes an interrupted purge
// visible to the next start, which finishes it: half a replica (a log
// without its snapshot, or the reverse) never starts.
func (h *Host) purge(i int) error {
	marker := h.purgeMarker(i)
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		return fmt.Errorf("shard %d: purge: %w", i, err)
	}
	if err := dirsync.Sync(h.cfg.DataDir); err != nil {
		return fmt.Errorf("shard %d: purge: %w", i, err)
	}
	err := errors.Join(
		h.logs.DeleteGroup(uint64(i)),
		raftlog.PurgeSnapshots(h.snapshotDir(), uint64(i)),
		h.cold.Shard(uint32(i)).Wipe(),
	)
	if err != nil {
		return fmt.Errorf("shard %d: purge: %w", i, err)
	}
	if err := os.Remove(marker); err != nil {
		return fmt.Errorf("shard %d: purge: %w", i, err)
	}
	return dirsync.Sync(h.cfg.DataDir)
}
