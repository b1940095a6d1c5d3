package raftlog

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

func TestSnapshotStorePerGroup(t *testing.T) {
	dir := t.TempDir()
	s1, err := NewSnapshotStore(dir, 1, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewSnapshotStore(dir, 2, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	for i := uint64(1); i <= 2; i++ { // retain=1: the second replaces the first
		sink, err := s1.Create(raft.SnapshotVersionMax, 10*i, 1, raft.Configuration{}, 0, trans)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write([]byte("state")); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	l1, err := s1.List()
	if err != nil || len(l1) != 1 || l1[0].Index != 20 {
		t.Fatalf("group 1 snapshots = %+v, %v; want just index 20", l1, err)
	}
	if l2, err := s2.List(); err != nil || len(l2) != 0 {
		t.Fatalf("group 2 snapshots = %+v, %v; want none", l2, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "group-1", "snapshots", l1[0].ID)); err != nil || !fi.IsDir() {
		t.Fatalf("snapshot not under dir/group-1: %v", err)
	}
	if _, err := NewSnapshotStore(dir, 3, 0, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("retain=0: err = %v, want ErrInvalidArgument", err)
	}
}
