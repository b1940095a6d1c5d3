package raftlog

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

func TestSnapshotStorePerGroup(t *testing.T) {
	dir := t.TempDir()
	s1, err := OpenSnapshots(dir, 1, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := OpenSnapshots(dir, 2, 1, nil)
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
	if _, err := OpenSnapshots(dir, 3, 0, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("retain=0: err = %v, want ErrInvalidArgument", err)
	}
}

// TestSnapshotsOwnTheirFiles: closing a snapshot's sink removes the file
// folders of the snapshots the store reaped (and strays), keeps those of
// the snapshots it keeps, and PurgeSnapshots removes the group's snapshots
// and files.
func TestSnapshotsOwnTheirFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSnapshots(dir, 4, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	attach := func(id string) {
		if err := os.MkdirAll(filepath.Join(s.FilesDir(), id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.FilesDir(), id, "000000.sst"), []byte("sst"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	attach("stray")
	var ids []string
	for i := uint64(1); i <= 3; i++ { // retain=2: the third reaps the first
		sink, err := s.Create(raft.SnapshotVersionMax, 10*i, 1, raft.Configuration{}, 0, trans)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sink.ID())
		attach(sink.ID())
		if _, err := sink.Write([]byte("state")); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(s.FilesDir())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	slices.Sort(left)
	want := slices.Sorted(slices.Values(ids[1:]))
	if !slices.Equal(left, want) {
		t.Fatalf("files left: %v, want those of the kept snapshots %v", left, want)
	}
	if err := PurgeSnapshots(dir, 4); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{s.FilesDir(), filepath.Join(dir, "group-4")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after purge, %s: %v, want it gone", p, err)
		}
	}
}

// A log that ends before the newest snapshot (raft installed the snapshot
// and crashed before removing the log) is emptied before raft starts; a
// log that reaches the snapshot is left alone.
func TestTrimLogBehindSnapshot(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, filepath.Join(dir, "journal"), JournalOptions{NoSync: true})
	snaps, err := OpenSnapshots(filepath.Join(dir, "snapshots"), 1, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := j.Group(1)
	if err := TrimLogBehindSnapshot(g, snaps); err != nil {
		t.Fatal(err)
	}
	mustStore(t, g, makeLogs(1, 1, 50, 1))
	_, trans := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, 100, 2, raft.Configuration{}, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := TrimLogBehindSnapshot(g, snaps); err != nil {
		t.Fatal(err)
	}
	checkRange(t, g, 0, 0)
	mustStore(t, g, makeLogs(1, 101, 150, 2)) // what the leader sends after the snapshot
	if err := TrimLogBehindSnapshot(g, snaps); err != nil {
		t.Fatal(err)
	}
	checkRange(t, g, 101, 150)
}
