package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/testwait"
)

// memDir is where tests put a journal on a memFS.
const memDir = "/journal"

// openMem opens a journal on m with segments of size bytes.
func openMem(t testing.TB, m *memFS, size int64) *Journal {
	t.Helper()
	j, err := OpenJournal(memDir, JournalOptions{SegmentSize: size, fs: m})
	if err != nil {
		t.Fatalf("OpenJournal: %v", err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// pendingLen returns the bytes of records waiting for the next write.
func (j *Journal) pendingLen() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pending == nil {
		return 0
	}
	return len(j.pending.frame) - frameHeaderLen
}

// Every frame has its own result. Here a frame that needs a new segment
// fails (the segment cannot be made), while the next, smaller frame fits
// in the segment and is written: each writer of the first frame, the one
// that wrote it and the one that only joined it, hears of the failure,
// and the journal holds exactly what its writers were told it holds.
func TestFailedRollFailsItsOwnWriters(t *testing.T) {
	const size = 4 << 10
	for try := range 10 {
		m := newMemFS()
		j := openMem(t, m, size)
		g1 := j.Group(1)
		next := uint64(1)
		for j.off < size-400 {
			mustStore(t, g1, makeLogs(1, next, next, 1))
			next++
		}
		big := makeLogs(1, next, next+20, 1) // more than the segment has left
		var held, rolling atomic.Bool
		hold, rollHeld, roll := make(chan struct{}), make(chan struct{}), make(chan struct{})
		m.setHook(func(op, name string) error {
			switch {
			case op == "sync" && held.CompareAndSwap(true, false):
				<-hold
			case op == "rename" && strings.HasSuffix(name, segmentSuffix) && rolling.CompareAndSwap(false, true):
				close(rollHeld)
				<-roll
				return fmt.Errorf("%w: %w", errInjected, syscall.ENOSPC)
			}
			return nil
		})
		held.Store(true)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		// Frame 0: one term, held in its sync.
		wg.Go(func() { errs[0] = j.Group(2).SetUint64([]byte("CurrentTerm"), 1) })
		testwait.For(t, 5*time.Second, "frame 0 in its sync", func() bool { return !held.Load() })
		// Frame A: entries and a vote term, which do not fit together.
		wg.Go(func() { errs[1] = g1.StoreLogs(big) })
		wg.Go(func() { errs[2] = j.Group(3).SetUint64([]byte("CurrentTerm"), 5) })
		want := len(entriesRecord(1, big)) + len(appendStableRecord(nil, 3, []byte("CurrentTerm"), make([]byte, 8)))
		testwait.For(t, 5*time.Second, "both writers of frame A waiting", func() bool { return j.pendingLen() == want })
		close(hold)
		<-rollHeld
		// Frame B: a small write, queued while frame A's roll fails.
		wg.Go(func() { errs[3] = j.Group(4).SetUint64([]byte("CurrentTerm"), 9) })
		testwait.For(t, 5*time.Second, "frame B waiting", func() bool { return j.pendingLen() > 0 })
		close(roll)
		wg.Wait()
		if errs[0] != nil || errs[3] != nil {
			t.Fatalf("try %d: the frames that fit: %v, %v; want both written", try, errs[0], errs[3])
		}
		if !errors.Is(errs[1], ErrStorage) || !errors.Is(errs[2], ErrStorage) {
			t.Fatalf("try %d: the writers of the frame whose segment failed: %v, %v; want both to fail", try, errs[1], errs[2])
		}
		for reopen := range 2 {
			if v, err := j.Group(3).GetUint64([]byte("CurrentTerm")); !errors.Is(err, ErrKeyNotFound) {
				t.Fatalf("try %d, reopen %d: group 3 holds a term %d (%v) its writer was told failed", try, reopen, v, err)
			}
			if v, err := j.Group(4).GetUint64([]byte("CurrentTerm")); err != nil || v != 9 {
				t.Fatalf("try %d, reopen %d: group 4's term = %d, %v; want 9", try, reopen, v, err)
			}
			checkRange(t, j.Group(1), 1, next-1)
			m.setHook(nil)
			j.Close()
			j = openMem(t, m, size)
			g1 = j.Group(1)
		}
		// Once segments can be made, the same write goes through.
		mustStore(t, g1, big)
		checkRange(t, g1, 1, next+20)
	}
}

// entriesRecord is the record StoreLogs writes for logs of group.
func entriesRecord(group uint64, logs []*raft.Log) []byte {
	b, at := beginRecord(nil, recEntries)
	b = binary.AppendUvarint(b, group)
	for _, l := range logs {
		e := appendLog(nil, l)
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	return finishRecord(b, at)
}

// An append must follow the group's log: an entry past its end means a
// write before it was lost, and the journal refuses it rather than take
// it for a new log. After the log is emptied (raft does that when it
// installs a snapshot) any index may start it again.
func TestJournalRefusesAnAppendThatDoesNotFollow(t *testing.T) {
	j := openJournal(t, t.TempDir(), JournalOptions{NoSync: true})
	g := j.Group(1)
	mustStore(t, g, makeLogs(1, 5, 10, 1))
	for _, from := range []uint64{12, 100, 4, 1} {
		if err := g.StoreLogs(makeLogs(1, from, from+1, 2)); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("StoreLogs from %d onto [5, 10] = %v, want ErrInvalidArgument", from, err)
		}
	}
	checkRange(t, g, 5, 10)
	mustStore(t, g, makeLogs(1, 11, 12, 1)) // the next entry
	mustStore(t, g, makeLogs(1, 8, 9, 1))   // over a conflicting suffix
	checkRange(t, g, 5, 9)
	if err := g.DeleteRange(5, 9); err != nil {
		t.Fatal(err)
	}
	mustStore(t, g, makeLogs(1, 500, 501, 3))
	checkRange(t, g, 500, 501)
}

// writeFrames writes n frames of entries (group 1, 10 entries each) and a
// term after each, closes the journal and returns its directory and
// segments.
func writeFrames(t *testing.T, opts JournalOptions, n uint64) (dir string, segs []string) {
	t.Helper()
	dir = t.TempDir()
	j, err := OpenJournal(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	g := j.Group(1)
	for i := uint64(0); i < n; i++ {
		mustStore(t, g, makeLogs(1, 10*i+1, 10*i+10, 1))
		if err := g.SetUint64([]byte("CurrentTerm"), i+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, segments(t, dir)
}

// damage applies hurt to the file at path.
func damage(t *testing.T, path string, hurt func([]byte)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hurt(data)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// frameStarts returns where the frames of a segment begin.
func frameStarts(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	id := segmentID(t, path)
	var at []int
	for off := 0; off < len(data); {
		h, ok := validFrame(data[off:], id)
		if !ok {
			break
		}
		at = append(at, off)
		off += h.frameLen()
	}
	return at
}

// Damage in the last segment with acknowledged frames after it is not a
// torn tail: opening refuses (ErrCorrupt) instead of dropping everything
// from the damage on. A zeroed sector is refused the same way, though it
// reads as the end of the frames.
func TestJournalRefusesDamageBeforeValidFrames(t *testing.T) {
	hurts := map[string]func(data []byte, frame int){
		"a flipped bit":  func(data []byte, at int) { data[at+frameHeaderLen+30] ^= 0x04 },
		"a zeroed frame": func(data []byte, at int) { clear(data[at : at+frameHeaderLen+40]) },
		"a zeroed sector": func(data []byte, at int) {
			s := at &^ (sectorSize - 1)
			clear(data[s : s+sectorSize])
		},
	}
	for name, hurt := range hurts {
		t.Run(name, func(t *testing.T) {
			dir, segs := writeFrames(t, JournalOptions{SegmentSize: testSegmentSize}, 40)
			last := segs[len(segs)-1]
			starts := frameStarts(t, last)
			at := starts[len(starts)/2]
			damage(t, last, func(data []byte) { hurt(data, at) })
			if _, err := OpenJournal(dir, JournalOptions{SegmentSize: testSegmentSize}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open with frame at offset %d of %d damaged: %v, want ErrCorrupt", at, len(starts), err)
			}
		})
	}
}

// After a segment's last frame only zeros may follow. In an older segment
// anything else, or a segment missing its last frames, is damage; in the
// last segment, bytes that a crash can leave are cut and zeroed, so that
// they cannot fail an open later, once the segment is sealed.
func TestJournalSegmentsEndInZeros(t *testing.T) {
	opts := JournalOptions{SegmentSize: 8 << 10}
	t.Run("a zeroed sector in an older segment", func(t *testing.T) {
		dir, segs := writeFrames(t, opts, 60)
		starts := frameStarts(t, segs[0])
		damage(t, segs[0], func(data []byte) {
			s := starts[3] &^ (sectorSize - 1)
			clear(data[s : s+sectorSize])
		})
		if _, err := OpenJournal(dir, opts); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open: %v, want ErrCorrupt", err)
		}
	})
	t.Run("an older segment without its last frame", func(t *testing.T) {
		dir, segs := writeFrames(t, opts, 60)
		starts := frameStarts(t, segs[0])
		damage(t, segs[0], func(data []byte) { clear(data[starts[len(starts)-1]:]) })
		if _, err := OpenJournal(dir, opts); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open: %v, want ErrCorrupt", err)
		}
	})
	t.Run("bytes after the end of an older segment", func(t *testing.T) {
		dir, segs := writeFrames(t, opts, 60)
		damage(t, segs[0], func(data []byte) { data[len(data)-100] = 1 })
		if _, err := OpenJournal(dir, opts); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open: %v, want ErrCorrupt", err)
		}
	})
	t.Run("a torn frame after the end of the last segment", func(t *testing.T) {
		dir, segs := writeFrames(t, opts, 3)
		last := segs[len(segs)-1]
		j := openJournal(t, dir, opts)
		end := j.off
		j.Close()
		// What a crash leaves of a frame whose first sector was not written.
		frame := entriesFrame(segmentID(t, last), 100, 31, 150)
		clear(frame[:2*sectorSize-int(end%sectorSize)])
		damage(t, last, func(data []byte) { copy(data[end:], frame) })
		j = openJournal(t, dir, opts)
		checkRange(t, j.Group(1), 1, 30)
		// Write on until the segment is sealed: it must still open.
		g := j.Group(1)
		for i := uint64(31); j.segID == segmentID(t, last); i += 10 {
			mustStore(t, g, makeLogs(1, i, i+9, 1))
		}
		lastIndex, _ := g.LastIndex()
		j.Close()
		checkRange(t, openJournal(t, dir, opts).Group(1), 1, lastIndex)
	})
}

// Old segments are removed oldest first; a removal that fails stops the
// round and is tried again later, so the segments on disk always follow
// each other. A purged group whose log was in an old segment stays purged
// after a reopen, and a gap in the segments (a lost segment) is refused.
func TestJournalRemovesSegmentsOldestFirst(t *testing.T) {
	const size = 4 << 10
	m := newMemFS()
	j := openMem(t, m, size)
	gone := j.Group(9)
	mustStore(t, gone, makeLogs(9, 1, 40, 4))
	if err := gone.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	stuck := filepath.Join(memDir, segmentName(j.segID))
	var refused atomic.Int64
	m.setHook(func(op, name string) error {
		if op == "remove" && name == stuck {
			refused.Add(1)
			return errInjected
		}
		return nil
	})
	if err := j.DeleteGroup(9); err != nil {
		t.Fatal(err)
	}
	g := j.Group(1)
	next := uint64(1)
	write := func(segs uint64) {
		for end := j.segID + segs; j.segID < end; next += 10 {
			mustStore(t, g, makeLogs(1, next, next+9, 1))
			if err := g.DeleteRange(next, next+9); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(8)
	if refused.Load() < 2 {
		t.Fatalf("the stuck segment's removal was tried %d times; want a try at each roll", refused.Load())
	}
	ids := segmentIDs(m)
	if ids[0] != segmentID(t, stuck) {
		t.Fatalf("segments %v on disk; the stuck one, %s, is the oldest and must stay with every one after it", ids, filepath.Base(stuck))
	}
	j.Close()
	j = openMem(t, m, size)
	checkRange(t, j.Group(9), 0, 0)
	if _, err := j.Group(9).GetUint64([]byte("CurrentTerm")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("the purged group's term after a reopen: %v, want ErrKeyNotFound", err)
	}
	m.setHook(nil)
	g = j.Group(1)
	write(2)
	if ids := segmentIDs(m); ids[0] == segmentID(t, stuck) {
		t.Fatalf("segments %v: the segment that could not be removed is still there once it can", ids)
	}
	// A lost segment between others is a gap: refused.
	for i := uint64(1); len(segmentIDs(m)) < 4; i += 10 {
		mustStore(t, j.Group(2), makeLogs(2, i, i+9, 1))
	}
	ids = segmentIDs(m)
	j.Close()
	if err := m.Remove(filepath.Join(memDir, segmentName(ids[1]))); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenJournal(memDir, JournalOptions{SegmentSize: size, fs: m}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with segment %d of %v missing: %v, want ErrCorrupt", ids[1], ids, err)
	}
}

func segmentIDs(m *memFS) []uint64 {
	var ids []uint64
	for id := range m.segmentData(memDir) {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

const lockChildEnv = "RAFTLOG_TEST_LOCK_CHILD_DIR"

// A journal directory is locked while open: a second open, in this process
// or another, is refused with an error that names the holder, before it
// reads or writes anything.
func TestJournalLocksItsDirectory(t *testing.T) {
	if dir := os.Getenv(lockChildEnv); dir != "" {
		_, err := OpenJournal(dir, JournalOptions{SegmentSize: testSegmentSize})
		fmt.Println(err)
		return
	}
	dir := t.TempDir()
	j := openJournal(t, dir, JournalOptions{SegmentSize: testSegmentSize})
	mustStore(t, j.Group(1), makeLogs(1, 1, 3, 1))
	before, err := os.ReadFile(filepath.Join(dir, segmentName(1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenJournal(dir, JournalOptions{SegmentSize: testSegmentSize}); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second open in the process: %v, want ErrLocked", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalLocksItsDirectory$")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), ErrLocked.Error()) || !strings.Contains(string(out), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("another process opening the journal: %q; want ErrLocked naming pid %d", out, os.Getpid())
	}
	after, err := os.ReadFile(filepath.Join(dir, segmentName(1)))
	if err != nil || string(after) != string(before) {
		t.Fatalf("the refused opens changed the segment (%v)", err)
	}
	checkRange(t, j.Group(1), 1, 3)
	j.Close()
	checkRange(t, openJournal(t, dir, JournalOptions{SegmentSize: testSegmentSize}).Group(1), 1, 3)
}

// After a failed fdatasync the journal refuses every write. The page cache
// still holds the frame that failed, which the disk never got: the next
// open reads it from the cache and must write it again before appending,
// or a power cut would leave acknowledged frames after a hole.
func TestJournalAfterAFailedSync(t *testing.T) {
	const size = 16 << 10
	m := newMemFS()
	j := openMem(t, m, size)
	g := j.Group(1)
	mustStore(t, g, makeLogs(1, 1, 10, 1))
	var fail atomic.Bool
	m.setHook(func(op, name string) error {
		if op == "sync" && fail.Load() {
			return fmt.Errorf("%w: %w", errInjected, syscall.EIO)
		}
		return nil
	})
	fail.Store(true)
	if err := g.StoreLogs(makeLogs(1, 11, 20, 1)); !errors.Is(err, ErrStorage) {
		t.Fatalf("a write whose sync fails: %v, want ErrStorage", err)
	}
	fail.Store(false)
	if err := g.SetUint64([]byte("CurrentTerm"), 2); !errors.Is(err, ErrStorage) {
		t.Fatalf("a write after a failed sync: %v, want the failure again", err)
	}
	j.Close()
	// The process restarts; the machine does not: the cache holds 11..20.
	j = openMem(t, m, size)
	g = j.Group(1)
	last, _ := g.LastIndex()
	mustStore(t, g, makeLogs(1, last+1, last+10, 2))
	if err := g.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatal(err)
	}
	j.Close()
	// A power cut: what was never synced is gone.
	m = m.reset()
	j = openMem(t, m, size)
	checkRange(t, j.Group(1), 1, last+10)
	if v, err := j.Group(1).GetUint64([]byte("CurrentTerm")); err != nil || v != 2 {
		t.Fatalf("CurrentTerm after the power cut = %d, %v; want 2", v, err)
	}
}

// When the disk has no room for the next segment, the journal refuses new
// log entries (ErrNoSpace) and keeps the room its segment has for what
// raft must write whatever happens: terms, votes, deleted ranges. Once
// space is freed it accepts entries again by itself.
func TestJournalWithoutRoom(t *testing.T) {
	const size = 64 << 10
	m := newMemFS()
	j, err := OpenJournal(memDir, JournalOptions{SegmentSize: size, fs: m})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	g := j.Group(1)
	// Room for the segments there are now (with the spare), no more.
	m.setCapacity(m.used())
	var next uint64 = 1
	var refused error
	for ; next < 10000 && refused == nil; next += 5 {
		refused = g.StoreLogs(makeLogs(1, next, next+4, 1))
	}
	next -= 5
	if !errors.Is(refused, ErrNoSpace) {
		t.Fatalf("entries on a full disk: %v, want ErrNoSpace", refused)
	}
	if !strings.Contains(refused.Error(), "no room") {
		t.Fatalf("the refusal %q does not say what is missing", refused)
	}
	for term := uint64(1); term <= 50; term++ {
		if err := g.SetUint64([]byte("CurrentTerm"), term); err != nil {
			t.Fatalf("term %d on a full disk: %v", term, err)
		}
		if err := g.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
			t.Fatalf("vote %d on a full disk: %v", term, err)
		}
	}
	if err := g.DeleteRange(1, 5); err != nil {
		t.Fatalf("a compaction on a full disk: %v", err)
	}
	if err := g.StoreLogs(makeLogs(1, next, next, 1)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("entries while the disk is still full: %v, want ErrNoSpace", err)
	}
	m.setCapacity(0)
	testwait.For(t, 5*time.Second, "entries accepted once there is room", func() bool {
		return g.StoreLogs(makeLogs(1, next, next, 1)) == nil
	})
	checkRange(t, g, 6, next)
	j.Close()
	j = openMem(t, m, size)
	checkRange(t, j.Group(1), 6, next)
	if v, _ := j.Group(1).GetUint64([]byte("CurrentTerm")); v != 50 {
		t.Fatalf("CurrentTerm after reopen = %d, want 50", v)
	}
}

// A closed journal says so: its groups do not read as empty.
func TestJournalClosedReadsFail(t *testing.T) {
	j, err := OpenJournal(t.TempDir(), JournalOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	g := j.Group(1)
	mustStore(t, g, makeLogs(1, 1, 3, 1))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.FirstIndex(); !errors.Is(err, ErrClosed) {
		t.Errorf("FirstIndex after Close: %v, want ErrClosed", err)
	}
	if _, err := g.LastIndex(); !errors.Is(err, ErrClosed) {
		t.Errorf("LastIndex after Close: %v, want ErrClosed", err)
	}
	var l raft.Log
	if err := g.GetLog(1, &l); !errors.Is(err, ErrClosed) {
		t.Errorf("GetLog after Close: %v, want ErrClosed", err)
	}
	if _, err := g.Get([]byte("CurrentTerm")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if err := g.StoreLogs(makeLogs(1, 4, 4, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("StoreLogs after Close: %v, want ErrClosed", err)
	}
}

// A journal of format 1 (records without frames) opens: its entries and
// stable values are read with that format's rules, and the journal goes on
// in a new segment of the current format.
func TestJournalReadsFormat1(t *testing.T) {
	dir := t.TempDir()
	var seg []byte
	seg = appendSegmentRecordOf(seg, 1, journalVersionRecords)
	seg = appendStableRecord(seg, 1, []byte("CurrentTerm"), binary.BigEndian.AppendUint64(nil, 3))
	b, at := beginRecord(seg, recEntries)
	b = binary.AppendUvarint(b, 1)
	for _, l := range makeLogs(1, 1, 20, 3) {
		e := appendLog(nil, l)
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	seg = finishRecord(b, at)
	seg = append(seg, make([]byte, 8<<10)...)
	if err := os.WriteFile(filepath.Join(dir, segmentName(1)), seg, 0o644); err != nil {
		t.Fatal(err)
	}
	j := openJournal(t, dir, JournalOptions{SegmentSize: testSegmentSize})
	g := j.Group(1)
	checkRange(t, g, 1, 20)
	if j.segID != 2 {
		t.Fatalf("writing to segment %d; want a new one, 2, after the format-1 segment", j.segID)
	}
	mustStore(t, g, makeLogs(1, 21, 30, 3))
	j.Close()
	j = openJournal(t, dir, JournalOptions{SegmentSize: testSegmentSize})
	checkRange(t, j.Group(1), 1, 30)
	if v, err := j.Group(1).GetUint64([]byte("CurrentTerm")); err != nil || v != 3 {
		t.Fatalf("CurrentTerm = %d, %v; want 3", v, err)
	}
}

// Frames go into space zeroed ahead of them (zeroAhead): the segment's
// writes are its frames and one zeroing per zeroAheadBytes of them, not one
// per frame, the last reaching past the frames, and the journal opens again
// with every entry. Without fsync nothing is zeroed: nothing would be
// saved.
func TestJournalZeroesAheadOfItsFrames(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("nosync=%v", noSync), func(t *testing.T) {
			m := newMemFS()
			var writes atomic.Int64
			m.setHook(func(op, name string) error {
				if op == "write" && strings.HasSuffix(name, segmentName(1)) {
					writes.Add(1)
				}
				return nil
			})
			opts := JournalOptions{SegmentSize: 8 << 20, NoSync: noSync, fs: m}
			j, err := OpenJournal(memDir, opts)
			if err != nil {
				t.Fatal(err)
			}
			g := j.Group(1)
			var last uint64
			for j.off < 3<<20+100<<10 {
				logs := makeLogs(1, last+1, last+10, 1)
				for _, l := range logs {
					l.Data = append(l.Data, make([]byte, 1000)...)
				}
				mustStore(t, g, logs)
				last += 10
			}
			frames := int64(j.nextSeq - 1) // the opening frame's included
			zeroings := writes.Load() - frames
			// A zeroing reaches zeroAheadBytes past the frame that made it,
			// and the next one comes with the first frame to end past that.
			const maxFrame = 16 << 10
			least, most := j.off/(zeroAheadBytes+maxFrame), j.off/zeroAheadBytes+1
			switch {
			case noSync && zeroings != 0:
				t.Fatalf("%d zeroings without fsync, want none", zeroings)
			case !noSync && (zeroings < least || zeroings > most || j.zeroed <= j.off || j.zeroed > j.off+zeroAheadBytes):
				t.Fatalf("%d writes for %d frames ending at %d, zeroed to %d: want %d to %d zeroings, the last past the frames by at most %d",
					writes.Load(), frames, j.off, j.zeroed, least, most, zeroAheadBytes)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j, err = OpenJournal(memDir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			var l raft.Log
			if f, _ := j.Group(1).FirstIndex(); f != 1 {
				t.Fatalf("reopened: first index %d, want 1", f)
			}
			if err := j.Group(1).GetLog(last, &l); err != nil || len(l.Data) != len(payload(1, last))+1000 {
				t.Fatalf("reopened: entry %d: %v, %d bytes", last, err, len(l.Data))
			}
		})
	}
}
