package raftlog

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

// shortReadFS is a journalFS on which the file name reads as if it
// ended after n bytes: a read past them is cut short with io.EOF.
type shortReadFS struct {
	journalFS
	name string
	n    int64
}

func (s shortReadFS) Open(name string) (journalFile, error) {
	f, err := s.journalFS.Open(name)
	if err != nil || name != s.name {
		return f, err
	}
	return shortReadFile{f, s.n}, nil
}

type shortReadFile struct {
	journalFile
	n int64
}

func (f shortReadFile) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) <= f.n {
		return f.journalFile.ReadAt(p, off)
	}
	if off >= f.n {
		return 0, io.EOF
	}
	n, err := f.journalFile.ReadAt(p[:f.n-off], off)
	if err == nil {
		err = io.EOF
	}
	return n, err
}

// Replay reads every segment into one buffer. Where a read of the last
// segment stops short, the rest reads as zeros, as in a buffer of its
// own, and not as the frames of the segment read before it: the open
// keeps every entry.
func TestReplayShortReadIsNotAnEarlierSegment(t *testing.T) {
	const size = 16 << 10
	m := newMemFS()
	j, err := OpenJournal(memDir, JournalOptions{SegmentSize: size, fs: m})
	if err != nil {
		t.Fatal(err)
	}
	g := j.Group(1)
	last := uint64(0)
	for j.segID < 3 || last%5 != 0 {
		last++
		mustStore(t, g, makeLogs(1, last, last, 1))
	}
	seg, end := j.segID, j.off
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if prev := m.segmentData(memDir)[seg-1]; allZero(prev[end:]) {
		t.Fatalf("segment %d holds only zeros from offset %d: the test means to leave frames there", seg-1, end)
	}
	short := shortReadFS{m, filepath.Join(memDir, segmentName(seg)), end}
	j, err = OpenJournal(memDir, JournalOptions{SegmentSize: size, fs: short})
	if err != nil {
		t.Fatalf("OpenJournal with segment %d read to offset %d: %v", seg, end, err)
	}
	defer j.Close()
	checkRange(t, j.Group(1), 1, last)
}

// Segments of different sizes follow each other: an entry larger than a
// segment gets a grown segment of its own, and the smaller ones after it
// are read into the buffer it grew. Every entry comes back.
func TestReplaySegmentsOfDifferentSizes(t *testing.T) {
	const size = 4 << 10
	dir := t.TempDir()
	opts := JournalOptions{SegmentSize: size, NoSync: true}
	j := openJournal(t, dir, opts)
	mustStore(t, j.Group(1), makeLogs(1, 1, 20, 1))
	big := &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte("big entry "), 3*size/10)}
	mustStore(t, j.Group(2), []*raft.Log{big})
	for i := uint64(21); i <= 500; i += 20 {
		mustStore(t, j.Group(1), makeLogs(1, i, i+19, 1))
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, p := range segments(t, dir) {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, st.Size())
	}
	if grown := slices.IndexFunc(sizes, func(n int64) bool { return n > size }); grown < 0 || sizes[len(sizes)-1] != size {
		t.Fatalf("segment sizes %v; the test means a grown segment, and one of %d bytes after it", sizes, size)
	}
	j = openJournal(t, dir, opts)
	checkRange(t, j.Group(1), 1, 500)
	var got raft.Log
	if err := j.Group(2).GetLog(1, &got); err != nil || !bytes.Equal(got.Data, big.Data) {
		t.Fatalf("group 2: GetLog(1) = %d bytes, %v; want the %d written", len(got.Data), err, len(big.Data))
	}
}
