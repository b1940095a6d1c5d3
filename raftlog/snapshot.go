package raftlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/l4xg/grid/internal/dirsync"
)

// Snapshots is one Raft group's snapshot store: hashicorp/raft's file
// snapshot store, and the files that a snapshot may carry beside its
// stream (the cold tier's sstables, which a restart links in instead of
// reading them back from the stream), one folder per snapshot id under
// FilesDir. It owns their retention, as dragonboat's snapshot file
// collection does: when a new snapshot is complete and the store has
// reaped the old ones, the folders of the snapshots it no longer keeps are
// removed (best effort: what a failure leaves is removed after the next
// snapshot). PurgeSnapshots removes a group's snapshots and their files.
//
// The layout under dir: group-<group> holds raft's snapshots (raft adds a
// "snapshots" subdirectory), cold/group-<group> the files.
type Snapshots struct {
	*raft.FileSnapshotStore
	files  string
	logger hclog.Logger
}

var _ raft.SnapshotStore = (*Snapshots)(nil)

// OpenSnapshots opens group's snapshot store under dir, keeping the newest
// retain snapshots (retain >= 1). logger receives the store's log lines
// (see RaftLogger); nil discards them.
func OpenSnapshots(dir string, group uint64, retain int, logger hclog.Logger) (*Snapshots, error) {
	if retain < 1 {
		return nil, fmt.Errorf("%w: group %d: retain %d snapshots, need at least 1", ErrInvalidArgument, group, retain)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	base := snapshotsDir(dir, group)
	ss, err := raft.NewFileSnapshotStoreWithLogger(base, retain, logger)
	if err != nil {
		return nil, fmt.Errorf("%w: group %d: snapshot store in %s: %w", ErrStorage, group, base, err)
	}
	return &Snapshots{FileSnapshotStore: ss, files: snapshotFilesDir(dir, group), logger: logger}, nil
}

// PurgeSnapshots removes group's snapshots and the files they carry from
// dir, and syncs the directories so that the removal is durable.
func PurgeSnapshots(dir string, group uint64) error {
	err := errors.Join(os.RemoveAll(snapshotsDir(dir, group)), os.RemoveAll(snapshotFilesDir(dir, group)))
	if err == nil {
		err = dirsync.Existing(dir, filepath.Join(dir, "cold"))
	}
	if err != nil {
		return fmt.Errorf("%w: group %d: purge snapshots: %w", ErrStorage, group, err)
	}
	return nil
}

func snapshotsDir(dir string, group uint64) string {
	return filepath.Join(dir, "group-"+strconv.FormatUint(group, 10))
}

func snapshotFilesDir(dir string, group uint64) string {
	return filepath.Join(dir, "cold", "group-"+strconv.FormatUint(group, 10))
}

// FilesDir is the directory of the files snapshots carry: the files of the
// snapshot with id ID belong in FilesDir()/ID.
func (s *Snapshots) FilesDir() string { return s.files }

// Create starts a snapshot, as raft's store does; closing its sink prunes
// the files of the snapshots the store no longer keeps.
func (s *Snapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &snapshotSink{SnapshotSink: sink, s: s}, nil
}

type snapshotSink struct {
	raft.SnapshotSink
	s *Snapshots
}

func (k *snapshotSink) Close() error {
	if err := k.SnapshotSink.Close(); err != nil {
		return err
	}
	if err := k.s.pruneFiles(); err != nil {
		k.s.logger.Warn("snapshot files of reaped snapshots not removed; the next snapshot retries", "error", err)
	}
	return nil
}

// pruneFiles removes the file folders of every snapshot the store does not
// keep.
func (s *Snapshots) pruneFiles() error {
	metas, err := s.List()
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(s.files)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if slices.ContainsFunc(metas, func(m *raft.SnapshotMeta) bool { return m.ID == e.Name() }) {
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(s.files, e.Name())))
	}
	return errors.Join(errs...)
}

// TrimLogBehindSnapshot empties a group's log when its newest snapshot is
// past the log's last entry; call it before raft.NewRaft. Raft removes a
// MonotonicLogStore's log once it has installed a snapshot from its leader
// (removeOldLogs), but a crash between the two, or a delete that fails
// (raft logs the failure and goes on), leaves a log that ends before the
// snapshot. Raft would then append the entries after the snapshot, which
// do not follow the log, and a JournalGroup refuses them. Every entry of
// such a log is in the snapshot, so nothing is lost.
func TrimLogBehindSnapshot(logs raft.LogStore, snaps raft.SnapshotStore) error {
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("%w: list snapshots: %w", ErrStorage, err)
	}
	if len(metas) == 0 {
		return nil
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	if last == 0 || last >= metas[0].Index { // List returns the newest first
		return nil
	}
	return logs.DeleteRange(first, last)
}
