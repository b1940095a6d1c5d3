package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// A read of a segment that stops short of its size fails the open with
// ErrStorage, even where the bytes it left out are the last segment's
// preallocated zeros: replay cannot know what they hold. (Replay reads
// every segment into one buffer; a short read once left the rest to read
// as zeros, rather than as the frames of the segment read before.) The
// failed open changes nothing: the journal opens whole after it.
func TestReplayShortReadPastLastFrameFails(t *testing.T) {
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
	checkShortReadFails(t, short, seg, end, int64(len(m.segmentData(memDir)[seg])))
	j, err = OpenJournal(memDir, JournalOptions{SegmentSize: size, fs: m})
	if err != nil {
		t.Fatalf("OpenJournal after the failed open: %v", err)
	}
	defer j.Close()
	checkRange(t, j.Group(1), 1, last)
}

// A read of a segment that stops short fails the open, wherever it stops:
// in the last segment at the end of a frame, where the frames it left out
// were acknowledged and nothing read looks damaged (the open once went on
// without them); inside a frame; and in an older segment. The failed open
// changes nothing, and the journal opens whole after it.
func TestReplayShortReadFails(t *testing.T) {
	const size = 16 << 10
	for _, c := range []struct {
		name string
		seg  uint64 // 0: the last
		at   func(ends []int64) int64
	}{
		{"last segment at a frame's end", 0, func(ends []int64) int64 { return ends[4] }},
		{"last segment inside a frame", 0, func(ends []int64) int64 { return ends[4] + 30 }},
		{"last segment, nothing read", 0, func([]int64) int64 { return 0 }},
		{"older segment", 1, func([]int64) int64 { return 2000 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMemFS()
			j, err := OpenJournal(memDir, JournalOptions{SegmentSize: size, fs: m})
			if err != nil {
				t.Fatal(err)
			}
			g := j.Group(1)
			// Write until the second segment holds ten writes, and
			// note where the frame of each ends.
			var ends []int64
			last := uint64(0)
			for j.segID < 2 || len(ends) < 10 {
				last++
				mustStore(t, g, makeLogs(1, last, last, 1))
				if j.segID == 2 {
					ends = append(ends, j.off)
				}
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			seg := c.seg
			if seg == 0 {
				seg = 2
			}
			before := slices.Clone(m.segmentData(memDir)[seg])
			at := c.at(ends)
			short := shortReadFS{m, filepath.Join(memDir, segmentName(seg)), at}
			checkShortReadFails(t, short, seg, at, int64(len(before)))
			if got := m.segmentData(memDir)[seg]; !bytes.Equal(got, before) {
				t.Fatalf("the failed open changed segment %d", seg)
			}
			j, err = OpenJournal(memDir, JournalOptions{SegmentSize: size, fs: m})
			if err != nil {
				t.Fatalf("OpenJournal after the failed open: %v", err)
			}
			defer j.Close()
			checkRange(t, j.Group(1), 1, last)
			if l, _ := j.Group(1).LastIndex(); l != last {
				t.Fatalf("LastIndex = %d, want %d", l, last)
			}
		})
	}
}

// checkShortReadFails opens the journal in memDir on fs, on which segment
// seg reads only its first n of want bytes, and checks that the open
// fails with ErrStorage and io.ErrUnexpectedEOF, naming the segment and
// both sizes.
func checkShortReadFails(t *testing.T, fs journalFS, seg uint64, n, want int64) {
	t.Helper()
	j, err := OpenJournal(memDir, JournalOptions{SegmentSize: 16 << 10, fs: fs, Logger: quietLogger{}})
	if err == nil {
		l, _ := j.Group(1).LastIndex()
		j.Close()
		t.Fatalf("OpenJournal with segment %d read to offset %d of %d succeeded, last index %d; want ErrStorage", seg, n, want, l)
	}
	if !errors.Is(err, ErrStorage) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("OpenJournal with segment %d read to offset %d: %v; want ErrStorage wrapping io.ErrUnexpectedEOF", seg, n, err)
	}
	for _, s := range []string{segmentName(seg), fmt.Sprintf("%d of its %d bytes", n, want)} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}
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

// posCap grows an index to its projected final size and an eighth more,
// within [a quarter more (double while small), twice] its capacity, and
// never below what it needs.
func TestPosCap(t *testing.T) {
	for _, c := range []struct {
		n, c, need  int
		done, left  int64
		want        int
		explanation string
	}{
		{10, 10, 11, 1000, 1 << 20, 20, "small: doubles"},
		{0, 0, 3, 0, 1 << 20, 3, "the first entries: what they need"},
		{1000, 1000, 1001, 1 << 10, 1 << 30, 2000, "a projection far ahead: twice"},
		{1000, 1000, 1001, 100_000, 30_000, 1463, "(1001 + 300) * 9/8"},
		{1000, 1000, 1001, 100_000, 0, 1250, "the end of the journal: a quarter more"},
		{1000, 1000, 5000, 100_000, 0, 5000, "need beyond twice: need"},
	} {
		if got := posCap(c.n, c.c, c.need, c.done, c.left); got != c.want {
			t.Errorf("posCap(%d, %d, %d, %d, %d) = %d, want %d: %s", c.n, c.c, c.need, c.done, c.left, got, c.want, c.explanation)
		}
	}
}

// Replay sizes each group's index to about what it holds. Groups 1 and 2
// write 2600 entries each from the first segment to the last, where
// doubling alone would end at 4096; group 3 writes as many in the first
// half only, and its index is at most twice its entries.
func TestReplaySizesIndexToFit(t *testing.T) {
	const per, batch = 2600, 10
	dir := t.TempDir()
	opts := JournalOptions{SegmentSize: 8 << 10, NoSync: true}
	j := openJournal(t, dir, opts)
	for i := uint64(1); i <= per; i += batch {
		mustStore(t, j.Group(1), makeLogs(1, i, i+batch-1, 1))
		mustStore(t, j.Group(2), makeLogs(2, i, i+batch-1, 1))
		if i <= per/2 {
			mustStore(t, j.Group(3), makeLogs(3, 2*i-1, 2*i+batch-2, 1))
			mustStore(t, j.Group(3), makeLogs(3, 2*i+batch-1, 2*i+2*batch-2, 1))
		}
	}
	if j.segID < 20 {
		t.Fatalf("%d segments; the test means about 20 or more", j.segID)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openJournal(t, dir, opts)
	for id, most := range map[uint64]int{1: per * 5 / 4, 2: per * 5 / 4, 3: 2 * per} {
		g := j.groups[id]
		if len(g.pos) != per || cap(g.pos) > most {
			t.Errorf("group %d: index of %d entries, capacity %d; want %d entries, capacity at most %d", id, len(g.pos), cap(g.pos), per, most)
		}
		checkRange(t, j.Group(id), 1, per)
	}
}
