package raftlog

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// NewSnapshotStore returns a raft.FileSnapshotStore for group, rooted at
// dir/group-<group> (raft adds its own "snapshots" subdirectory), keeping
// the newest retain snapshots (retain >= 1). logger receives the snapshot
// store's log lines (see RaftLogger); nil discards them.
func NewSnapshotStore(dir string, group uint64, retain int, logger hclog.Logger) (raft.SnapshotStore, error) {
	if retain < 1 {
		return nil, fmt.Errorf("%w: group %d: retain %d snapshots, need at least 1", ErrInvalidArgument, group, retain)
	}
	base := filepath.Join(dir, "group-"+strconv.FormatUint(group, 10))
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ss, err := raft.NewFileSnapshotStoreWithLogger(base, retain, logger)
	if err != nil {
		return nil, fmt.Errorf("%w: group %d: snapshot store in %s: %w", ErrStorage, group, base, err)
	}
	return ss, nil
}
