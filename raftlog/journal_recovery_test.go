package raftlog

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// tornJournal writes entries 1..10 and a term to group 1, closes the
// journal and returns its directory, its last segment's path and where
// its frames end.
func tornJournal(t *testing.T) (dir, seg string, end int64) {
	t.Helper()
	dir = t.TempDir()
	j, err := OpenJournal(dir, JournalOptions{SegmentSize: testSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	g := j.Group(1)
	mustStore(t, g, makeLogs(1, 1, 10, 1))
	if err := g.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	seg, end = filepath.Join(dir, segmentName(j.segID)), j.off
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, seg, end
}

// entriesFrame returns the frame that storing entries from..to of group 1
// in segment seg as frame number seq writes.
func entriesFrame(seg, seq, from, to uint64) []byte {
	return finishFrame(append(make([]byte, frameHeaderLen), entriesRecord(1, makeLogs(1, from, to, 1))...), seg, seq)
}

// segmentID reads the id from a segment's path.
func segmentID(t *testing.T, seg string) uint64 {
	t.Helper()
	id, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(seg), segmentSuffix), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A write that a crash interrupted leaves a torn frame at the end of the
// last segment: some of its sectors written, the others still zeros.
// Nothing in it was acknowledged, so opening cuts it off and keeps
// everything before it, and later writes and reopens work.
func TestJournalCutsATornTail(t *testing.T) {
	tears := map[string]func(f []byte, at int64) []byte{
		"the first sectors only": func(f []byte, at int64) []byte { return f[:2*sectorSize-int(at%sectorSize)] },
		"the header only":        func(f []byte, at int64) []byte { return f[:frameHeaderLen] },
		"a sector missing in the middle": func(f []byte, at int64) []byte {
			s := 2*sectorSize - int(at%sectorSize)
			clear(f[s : s+sectorSize])
			return f
		},
		"the first sector missing": func(f []byte, at int64) []byte {
			clear(f[:sectorSize-int(at%sectorSize)])
			return f
		},
		"the last sector missing": func(f []byte, at int64) []byte {
			end := at + int64(len(f))
			return f[:(end-1)/sectorSize*sectorSize-at]
		},
	}
	for name, tear := range tears {
		t.Run(name, func(t *testing.T) {
			dir, seg, end := tornJournal(t)
			f, err := os.OpenFile(seg, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			frame := entriesFrame(segmentID(t, seg), 4, 11, 200)
			if len(frame) < 4*sectorSize {
				t.Fatalf("the torn frame has %d bytes; the test needs at least 4 sectors", len(frame))
			}
			if _, err := f.WriteAt(tear(frame, end), end); err != nil {
				t.Fatal(err)
			}
			f.Close()
			j := openJournal(t, dir, JournalOptions{SegmentSize: testSegmentSize})
			g := j.Group(1)
			checkRange(t, g, 1, 10)
			if n, err := g.GetUint64([]byte("CurrentTerm")); err != nil || n != 7 {
				t.Fatalf("CurrentTerm after the cut = %d, %v; want 7", n, err)
			}
			mustStore(t, g, makeLogs(1, 11, 12, 2))
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j = openJournal(t, dir, JournalOptions{SegmentSize: testSegmentSize})
			checkRange(t, j.Group(1), 1, 12)
		})
	}
}

// Damage that no crash leaves (bytes in every sector of the last frame,
// yet the frame does not check) is not a torn write: it may be an
// acknowledged frame gone bad, and opening says so instead of cutting it.
func TestJournalRefusesDamageToTheLastFrame(t *testing.T) {
	damage := map[string]func(f []byte){
		"a flipped bit in the body":   func(f []byte) { f[len(f)/2] ^= 0x10 },
		"a flipped bit in the header": func(f []byte) { f[10] ^= 0x01 },
		"an absurd length":            func(f []byte) { binary.LittleEndian.PutUint32(f[8:], 1<<31) },
		"noise": func(f []byte) {
			for i := range f {
				f[i] = byte(i*7 + 1)
			}
		},
	}
	for name, hurt := range damage {
		t.Run(name, func(t *testing.T) {
			dir, seg, end := tornJournal(t)
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			// The damage lands in the frame holding the term: the last one.
			last := lastFrameStart(t, data, segmentID(t, seg), end)
			hurt(data[last:end])
			if err := os.WriteFile(seg, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenJournal(dir, JournalOptions{SegmentSize: testSegmentSize}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open with the last frame damaged: %v, want ErrCorrupt", err)
			}
		})
	}
}

// lastFrameStart returns where the last frame before end begins in a
// segment's data.
func lastFrameStart(t *testing.T, data []byte, id uint64, end int64) int64 {
	t.Helper()
	var at int64
	for off := int64(0); off < end; {
		h, ok := validFrame(data[off:], id)
		if !ok {
			t.Fatalf("no valid frame at offset %d", off)
		}
		at, off = off, off+int64(h.frameLen())
	}
	return at
}

// A bad record before the last segment's tail is not a torn write:
// something damaged acknowledged data, and opening says so instead of
// dropping it.
func TestJournalRefusesCorruption(t *testing.T) {
	dir := t.TempDir()
	opts := JournalOptions{SegmentSize: 4 << 10}
	j, err := OpenJournal(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	g := j.Group(1)
	for i := uint64(1); i <= 700; i += 10 {
		mustStore(t, g, makeLogs(1, i, i+9, 1))
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segments(t, dir)
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test needs at least 3", len(segs))
	}
	for _, seg := range segs[:len(segs)-1] {
		data, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		// Past the opening record: inside the first entries record.
		data[64] ^= 0x01
		if err := os.WriteFile(seg, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenJournal(dir, opts); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open with %s damaged: %v, want ErrCorrupt", filepath.Base(seg), err)
		}
		data[64] ^= 0x01
		if err := os.WriteFile(seg, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkRange(t, openJournal(t, dir, opts).Group(1), 1, 700)
}

// A journal from a newer format, or a stray file among the segments, is
// refused rather than misread.
func TestJournalRefusesForeignFiles(t *testing.T) {
	dir, seg, _ := tornJournal(t)
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	// The segment's first frame, written again naming a newer format.
	id := segmentID(t, seg)
	h, ok := validFrame(data, id)
	if !ok {
		t.Fatal("no frame at the start of the segment")
	}
	newer := slices.Clone(data)
	body := newer[frameHeaderLen : frameHeaderLen+h.bodyLen]
	body[recHeaderLen+len(journalMagic)] = journalVersion + 1
	finishRecord(body[:recHeaderLen+len(journalMagic)+1+8], 0)
	finishFrame(newer[:frameHeaderLen+h.bodyLen], id, h.seq)
	if err := os.WriteFile(seg, newer, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenJournal(dir, JournalOptions{SegmentSize: testSegmentSize}); !errors.Is(err, ErrIncompatibleLayout) {
		t.Fatalf("open of a newer format: %v, want ErrIncompatibleLayout", err)
	}
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes"+segmentSuffix), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenJournal(dir, JournalOptions{SegmentSize: testSegmentSize}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with a stray segment name: %v, want ErrCorrupt", err)
	}
}

// FuzzJournalOpen writes arbitrary bytes after a valid segment start and
// opens the journal: opening never panics, and a journal that opens can be
// read, written and reopened.
func FuzzJournalOpen(f *testing.F) {
	start := finishFrame(appendSegmentRecord(make([]byte, frameHeaderLen), 1), 1, 1)
	frame := func(rec []byte) []byte { return finishFrame(append(make([]byte, frameHeaderLen), rec...), 1, 2) }
	f.Add(frame(appendStableRecord(nil, 1, []byte("CurrentTerm"), []byte{0, 0, 0, 0, 0, 0, 0, 7})))
	f.Add(frame(appendDeleteRangeRecord(nil, 1, 1, 5)))
	f.Add(frame(appendDeleteGroupRecord(nil, 3)))
	f.Add(entriesFrame(1, 2, 1, 3))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 2})
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), append(append([]byte(nil), start...), tail...), 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := OpenJournal(dir, JournalOptions{NoSync: true, SegmentSize: 4 << 10})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrIncompatibleLayout) {
				t.Fatalf("open: %v, want ErrCorrupt", err)
			}
			return
		}
		for id := uint64(0); id < 4; id++ {
			g := j.Group(id)
			first, _ := g.FirstIndex()
			last, _ := g.LastIndex()
			for n := uint64(0); last != 0 && n <= min(last-first, 1000); n++ {
				var l raft.Log
				_ = g.GetLog(first+n, &l) // may be ErrCorrupt; must not panic
			}
		}
		g := j.Group(1)
		last, _ := g.LastIndex()
		if last > math.MaxUint64-2 {
			return
		}
		mustStore(t, g, makeLogs(1, last+1, last+2, 1))
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		j, err = OpenJournal(dir, JournalOptions{NoSync: true, SegmentSize: 4 << 10})
		if err != nil {
			t.Fatalf("reopen after a write: %v", err)
		}
		if l, _ := j.Group(1).LastIndex(); l != last+2 {
			t.Fatalf("after reopen group 1 ends at %d, want %d", l, last+2)
		}
		j.Close()
	})
}

// writeLegacy writes a Pebble database laid out as the builds before the
// journal did: log entries of groups and their stable values.
func writeLegacy(t *testing.T, dir string, layout byte, logs map[uint64][]*raft.Log, terms map[uint64]uint64) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.Set(legacyLayoutKey, []byte{layout}, nil))
	key := func(kind byte, group uint64, rest []byte) []byte {
		k := binary.BigEndian.AppendUint64([]byte{kind}, group)
		return append(k, rest...)
	}
	for g, ls := range logs {
		for _, l := range ls {
			must(b.Set(key(legacyLog, g, binary.BigEndian.AppendUint64(nil, l.Index)), appendLog(nil, l), nil))
		}
	}
	for g, term := range terms {
		must(b.Set(key(legacyStable, g, []byte("CurrentTerm")), binary.BigEndian.AppendUint64(nil, term), nil))
	}
	must(b.Commit(pebble.Sync))
	must(db.Close())
}

// A data dir written before the journal holds the Raft logs in a Pebble
// database. Opening the journal copies it: entries (the run after a gap,
// as raft needs them) and stable values of every group, and the database
// is gone afterwards.
func TestOpenJournalFromMovesALegacyLog(t *testing.T) {
	base := t.TempDir()
	legacy, dir := filepath.Join(base, "raft"), filepath.Join(base, "journal")
	writeLegacy(t, legacy, legacyLayout, map[uint64][]*raft.Log{
		1: makeLogs(1, 1, 30000, 1),                                // more than one commit's worth of records
		2: append(makeLogs(2, 5, 9, 1), makeLogs(2, 20, 30, 2)...), // a gap
	}, map[uint64]uint64{1: 11, 2: 12, 3: 13})
	// A copy that a crash interrupted is started again.
	if err := os.MkdirAll(dir+".migrating", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir+".migrating", segmentName(1)), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := OpenJournalFrom(dir, legacy, JournalOptions{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	checkRange(t, j.Group(1), 1, 30000)
	checkRange(t, j.Group(2), 20, 30)
	checkRange(t, j.Group(3), 0, 0)
	for id := uint64(1); id <= 3; id++ {
		if n, err := j.Group(id).GetUint64([]byte("CurrentTerm")); err != nil || n != 10+id {
			t.Fatalf("group %d: CurrentTerm = %d, %v; want %d", id, n, err, 10+id)
		}
	}
	for _, gone := range []string{legacy, dir + ".migrating"} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after the move: %v, want it gone", gone, err)
		}
	}
}

// A legacy database in a layout this build does not know is refused, and
// left as it was.
func TestOpenJournalFromRefusesAnUnknownLayout(t *testing.T) {
	base := t.TempDir()
	legacy, dir := filepath.Join(base, "raft"), filepath.Join(base, "journal")
	writeLegacy(t, legacy, legacyLayout+1, map[uint64][]*raft.Log{1: makeLogs(1, 1, 3, 1)}, nil)
	if _, err := OpenJournalFrom(dir, legacy, JournalOptions{Logger: quietLogger{}}); !errors.Is(err, ErrIncompatibleLayout) {
		t.Fatalf("open over a layout-%d database: %v, want ErrIncompatibleLayout", legacyLayout+1, err)
	}
	if _, err := os.Stat(legacy); err != nil {
		t.Fatalf("the refused database: %v, want it kept", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a journal after a refused move: %v", err)
	}
}

// A segment that cannot be created (a full disk, here a directory in the
// way of its file) fails the writes that needed it and loses nothing; once
// it can be created, writes go on.
func TestJournalSurvivesAFailedRoll(t *testing.T) {
	dir := t.TempDir()
	opts := JournalOptions{SegmentSize: 4 << 10}
	j := openJournal(t, dir, opts)
	g := j.Group(1)
	blocker := filepath.Join(dir, segmentName(j.segID+1))
	if err := os.Mkdir(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	next := uint64(1)
	var failed error
	for ; next < 1000 && failed == nil; next += 10 {
		failed = g.StoreLogs(makeLogs(1, next, next+9, 1))
	}
	if !errors.Is(failed, ErrStorage) {
		t.Fatalf("writes past the segment: %v, want ErrStorage", failed)
	}
	next -= 10 // the batch that failed
	// A write that still fits in the segment goes through; one that does
	// not fails again.
	if err := g.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatalf("a small write after a failed roll: %v", err)
	}
	if err := g.StoreLogs(makeLogs(1, next, next+9, 1)); !errors.Is(err, ErrStorage) {
		t.Fatalf("a write while the segment still cannot be created: %v, want ErrStorage", err)
	}
	checkRange(t, g, 1, next-1)
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	mustStore(t, g, makeLogs(1, next, next+9, 1))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openJournal(t, dir, opts)
	checkRange(t, j.Group(1), 1, next+9)
	if n, err := j.Group(1).GetUint64([]byte("CurrentTerm")); err != nil || n != 2 {
		t.Fatalf("CurrentTerm after reopen = %d, %v; want 2", n, err)
	}
}

// A journal directory beside a legacy database that is not the finished
// copy of it (here an empty journal) does not cost the database: the open
// refuses, naming it, and keeps the database.
func TestOpenJournalFromChecksTheJournalFirst(t *testing.T) {
	base := t.TempDir()
	legacy, dir := filepath.Join(base, "raft"), filepath.Join(base, "journal")
	writeLegacy(t, legacy, legacyLayout, map[uint64][]*raft.Log{1: makeLogs(1, 1, 30, 1)}, map[uint64]uint64{1: 11})
	j, err := OpenJournal(dir, JournalOptions{SegmentSize: testSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if _, err := OpenJournalFrom(dir, legacy, JournalOptions{Logger: quietLogger{}}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "kept") {
		t.Fatalf("open beside a journal that is not the copy: %v, want ErrCorrupt saying the database is kept", err)
	}
	if _, err := os.Stat(legacy); err != nil {
		t.Fatalf("the database after the refused open: %v, want it kept", err)
	}
	// Removed as the error says, the journal is moved again.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	j, err = OpenJournalFrom(dir, legacy, JournalOptions{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	checkRange(t, j.Group(1), 1, 30)
	if _, err := os.Stat(legacy); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the database after the move: %v, want it gone", err)
	}
}
