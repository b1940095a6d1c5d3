package raftlog_test

// These tests use only the package's exported API and its files on disk,
// so they run against any version of the journal: each reproduces one of
// the faults of issue 27 from the outside (and failed on the journal
// before it: format 1, without frames).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/raftlog"
)

func bbLogs(group, from, to uint64) []*raft.Log {
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "g%d/i%d/%0200d", group, i, i)})
	}
	return logs
}

func bbSegments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

// bbHolds reports whether group 1 of the journal in dir holds entries
// 1..last and the term, or why not.
func bbHolds(j *raftlog.Journal, last, term uint64) string {
	g := j.Group(1)
	f, _ := g.FirstIndex()
	l, _ := g.LastIndex()
	if f != 1 || l != last {
		return fmt.Sprintf("entries [%d, %d], want [1, %d]", f, l, last)
	}
	if v, err := g.GetUint64([]byte("CurrentTerm")); v != term {
		return fmt.Sprintf("CurrentTerm %d (%v), want %d", v, err, term)
	}
	return ""
}

// bbWrite writes n batches of 10 entries and a term after each to group 1.
func bbWrite(t *testing.T, dir string, opts raftlog.JournalOptions, n uint64) {
	t.Helper()
	j, err := raftlog.OpenJournal(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	g := j.Group(1)
	for i := uint64(0); i < n; i++ {
		if err := g.StoreLogs(bbLogs(1, 10*i+1, 10*i+10)); err != nil {
			t.Fatal(err)
		}
		if err := g.SetUint64([]byte("CurrentTerm"), i+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// bbOpenAfterDamage opens dir and fails unless the open refuses with
// ErrCorrupt or the journal holds everything written.
func bbOpenAfterDamage(t *testing.T, dir string, opts raftlog.JournalOptions, last, term uint64) {
	t.Helper()
	j, err := raftlog.OpenJournal(dir, opts)
	if errors.Is(err, raftlog.ErrCorrupt) {
		return
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer j.Close()
	if why := bbHolds(j, last, term); why != "" {
		t.Fatalf("the open accepted the damage and lost acknowledged writes: %s", why)
	}
}

// Issue 27, item 1: writers told their write is durable when it is not.
// A segment that cannot be made fails the frames that need it; writes
// that fit go on. Every write acknowledged must be there after a reopen.
func TestBlackboxFailedRollAcknowledgesNothingDropped(t *testing.T) {
	dir := t.TempDir()
	opts := raftlog.JournalOptions{SegmentSize: 64 << 10}
	j, err := raftlog.OpenJournal(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	// No segment after the first can be made: a directory stands in the
	// way of its name (and of the spare's, in the journal that has one).
	for _, name := range []string{"0000000000000002.seg", "next-segment.spare"} {
		os.Remove(filepath.Join(dir, name))
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	acked := map[uint64]uint64{} // group -> the last term acknowledged
	var wg sync.WaitGroup
	for id := uint64(1); id <= 8; id++ {
		wg.Go(func() {
			g := j.Group(id)
			next := uint64(1)
			for i := uint64(1); i <= 300; i++ {
				if id%2 == 0 { // these fill the segment: big writes that fail once it is full
					if err := g.StoreLogs(bbLogs(id, next, next+4)); err == nil {
						next += 5
					}
					continue
				}
				if err := g.SetUint64([]byte("CurrentTerm"), i); err == nil {
					mu.Lock()
					acked[id] = i
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	j.Close()
	for _, name := range []string{"0000000000000002.seg", "next-segment.spare"} {
		os.Remove(filepath.Join(dir, name))
	}
	j, err = raftlog.OpenJournal(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for id, term := range acked {
		if v, err := j.Group(id).GetUint64([]byte("CurrentTerm")); v != term {
			t.Errorf("group %d: term %d was acknowledged, the journal holds %d (%v)", id, term, v, err)
		}
	}
}

// Issue 27, item 2: one bad record in the last segment drops everything
// after it.
func TestBlackboxDamageInTheLastSegment(t *testing.T) {
	dir := t.TempDir()
	opts := raftlog.JournalOptions{SegmentSize: 1 << 20}
	bbWrite(t, dir, opts, 40)
	segs := bbSegments(t, dir)
	data, err := os.ReadFile(segs[len(segs)-1])
	if err != nil {
		t.Fatal(err)
	}
	end := len(data)
	for end > 0 && data[end-1] == 0 {
		end--
	}
	data[end/3] ^= 0x10
	if err := os.WriteFile(segs[len(segs)-1], data, 0o644); err != nil {
		t.Fatal(err)
	}
	bbOpenAfterDamage(t, dir, opts, 400, 40)
}

// Issue 27, item 3: zeros in an older segment silently end it: here they
// start where a record does (the segment's start), and run on.
func TestBlackboxZeroedOlderSegment(t *testing.T) {
	dir := t.TempDir()
	opts := raftlog.JournalOptions{SegmentSize: 8 << 10}
	bbWrite(t, dir, opts, 60)
	segs := bbSegments(t, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test needs 3", len(segs))
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	clear(data[:len(data)/2])
	if err := os.WriteFile(segs[0], data, 0o644); err != nil {
		t.Fatal(err)
	}
	bbOpenAfterDamage(t, dir, opts, 600, 60)
}

// Issue 27, item 4: open accepts a gap in the segments.
func TestBlackboxLostSegment(t *testing.T) {
	dir := t.TempDir()
	opts := raftlog.JournalOptions{SegmentSize: 8 << 10}
	bbWrite(t, dir, opts, 60)
	segs := bbSegments(t, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test needs 3", len(segs))
	}
	if err := os.Remove(segs[1]); err != nil {
		t.Fatal(err)
	}
	bbOpenAfterDamage(t, dir, opts, 600, 60)
}

// Issue 27, item 5: nothing locks the journal directory.
func TestBlackboxSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	j, err := raftlog.OpenJournal(dir, raftlog.JournalOptions{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if j2, err := raftlog.OpenJournal(dir, raftlog.JournalOptions{SegmentSize: 1 << 20}); err == nil {
		j2.Close()
		t.Fatal("a second open of a journal in use succeeded")
	}
}

// Issue 27, item 8: after Close a group reads as empty.
func TestBlackboxReadsAfterClose(t *testing.T) {
	j, err := raftlog.OpenJournal(t.TempDir(), raftlog.JournalOptions{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	g := j.Group(1)
	if err := g.StoreLogs(bbLogs(1, 1, 3)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if last, err := g.LastIndex(); err == nil {
		t.Fatalf("LastIndex after Close = %d, nil; want an error, not an empty log", last)
	}
}
