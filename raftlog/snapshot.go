package raftlog

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/raft"
)

// NewSnapshotStore returns a raft.FileSnapshotStore for group, rooted at
// dir/group-<group> (raft adds its own "snapshots" subdirectory), keeping
// the newest retain snapshots (retain >= 1). logOutput receives the
// snapshot store's log lines; nil means os.Stderr.
func NewSnapshotStore(dir string, group uint64, retain int, logOutput io.Writer) (raft.SnapshotStore, error) {
	if retain < 1 {
		return nil, fmt.Errorf("%w: group %d: retain %d snapshots, need at least 1", ErrInvalidArgument, group, retain)
	}
	base := filepath.Join(dir, "group-"+strconv.FormatUint(group, 10))
	ss, err := raft.NewFileSnapshotStore(base, retain, logOutput)
	if err != nil {
		return nil, fmt.Errorf("%w: group %d: snapshot store in %s: %w", ErrStorage, group, base, err)
	}
	return ss, nil
}
