package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/l4xg/grid/internal/dirsync"
)

// DefaultSegmentSize is the size of a journal segment when
// JournalOptions.SegmentSize is zero.
const DefaultSegmentSize = 64 << 20

// copyForwardAfter is how many segments a group's oldest entry may lag
// behind the segment being opened before the group's entries may be copied
// into it. A segment is removed only once no group has entries in it or in
// an older one (see reap), so without the copy an idle group, one that
// rarely compacts its log, would keep every later segment on disk. The copy
// is made only when at most a quarter of the segments it would free is
// live (liveShareToCopy): when the logs themselves fill them, copying would
// only write them again.
const (
	copyForwardAfter = 4
	liveShareToCopy  = 4
)

// JournalOptions configures a Journal. The zero value is the production
// configuration.
type JournalOptions struct {
	// SegmentSize is the size each segment file is preallocated to. Zero
	// means DefaultSegmentSize. A write larger than a segment gets a
	// segment of its own, grown past this size.
	SegmentSize int64

	// NoSync makes writes return before they are fsynced. UNSAFE, as
	// Options.NoSync: for tests and benchmarks only.
	NoSync bool

	// Logger receives the journal's warnings (a torn tail cut at open).
	// Nil drops them.
	Logger Logger
}

func (o JournalOptions) withDefaults() JournalOptions {
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	return o
}

// Validate reports whether o, with its defaults, is usable, wrapping
// ErrInvalidOptions if not.
func (o JournalOptions) Validate() error {
	o = o.withDefaults()
	if o.SegmentSize < 4<<10 || o.SegmentSize > 1<<30 {
		return fmt.Errorf("%w: SegmentSize %d is outside [4 KiB, 1 GiB]", ErrInvalidOptions, o.SegmentSize)
	}
	return nil
}

// Journal is the Raft log and stable store of every group on a node, kept
// in one sequence of preallocated segment files. It replaced a Pebble database (see the package documentation).
// Writers from any group append records to one
// pending buffer; whichever writer finds no write in progress writes the
// whole buffer with one write and one fdatasync (group commit) and wakes
// the others. The index (where each entry is, and the stable values) is in
// memory and rebuilt by replaying the segments at open; entries are read
// back with pread. See doc.go.
type Journal struct {
	dir  string
	opts JournalOptions

	// mu guards the pending buffer and the commit state.
	mu       sync.Mutex
	cond     sync.Cond
	pending  []byte // records not yet written
	spare    []byte // the buffer being written, reused as the next pending
	queued   uint64 // commits appended to pending so far
	durable  uint64 // commits written and synced
	flushing bool   // a writer is writing and syncing
	closed   bool
	err      error // the first write or sync failure: every later write fails
	// A segment that could not be created (a full disk) fails the writes
	// of the batch that needed it, up to failedUpto, with rollErr; nothing
	// was written, so later writes try again.
	rollErr    error
	failedUpto uint64

	// Owned by the writer that is flushing (flushing == true), or by Open
	// and Close.
	seg     *os.File // the segment being written
	segID   uint64
	off     int64 // where the next record goes in seg
	scratch journalOp

	// idx guards the index and the open segment files. The flushing writer
	// takes it to apply what it synced; readers share it, also while they
	// read a segment, so a segment is not closed under them.
	idx    sync.RWMutex
	groups map[uint64]*journalGroup
	files  map[uint64]*os.File // segment id -> file, every live segment

	// readBufs and encodeBufs hold *[]byte buffers for GetLog and
	// StoreLogs.
	readBufs, encodeBufs sync.Pool

	writes                writeCounters
	fsyncs, fsyncNanos    atomic.Uint64
	copiedForward, reaped atomic.Uint64
}

// journalGroup is one group's part of the index.
type journalGroup struct {
	first  uint64     // index of pos[0]
	pos    []entryPos // entries first..first+len(pos)-1
	stable map[string][]byte
}

// entryPos is where an entry's encoding lies.
type entryPos struct {
	seg uint64
	off int64
	n   int
}

func (g *journalGroup) last() uint64 {
	if len(g.pos) == 0 {
		return 0
	}
	return g.first + uint64(len(g.pos)) - 1
}

const segmentSuffix = ".seg"

func segmentName(id uint64) string { return fmt.Sprintf("%016x%s", id, segmentSuffix) }

// OpenJournal opens or creates the journal in directory dir. It replays
// every segment; a torn record at the end of the last segment (a write
// that a crash interrupted, so never acknowledged) is cut off and logged,
// while a bad record anywhere else fails the open with ErrCorrupt.
func OpenJournal(dir string, opts JournalOptions) (*Journal, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	j := &Journal{dir: dir, opts: opts, groups: map[uint64]*journalGroup{}, files: map[uint64]*os.File{}}
	j.cond.L = &j.mu
	j.readBufs.New = func() any { return new([]byte) }
	j.encodeBufs.New = func() any { return new([]byte) }
	ids, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if err := j.replay(id, i == len(ids)-1); err != nil {
			return nil, errors.Join(err, j.closeFiles())
		}
	}
	if j.seg == nil {
		if err := j.newSegment(1); err != nil {
			return nil, errors.Join(err, j.closeFiles())
		}
	}
	return j, nil
}

// listSegments returns the ids of dir's segments, in order.
func listSegments(dir string) ([]uint64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	var ids []uint64
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), segmentSuffix)
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(name, 16, 64)
		if err != nil || len(name) != 16 || id == 0 {
			return nil, fmt.Errorf("%w: unexpected file %s in the journal", ErrCorrupt, de.Name())
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// replay applies segment id's records to the index. The last segment
// becomes the one written next, from the end of its last good record.
func (j *Journal) replay(id uint64, last bool) error {
	path := filepath.Join(j.dir, segmentName(id))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	j.files[id] = f
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	off, bad := 0, error(nil)
	for off < len(data) {
		typ, p, n, err := readRecord(data[off:])
		if errors.Is(err, errEndOfRecords) {
			break
		}
		if err == nil && (off == 0) != (typ == recSegment) {
			err = fmt.Errorf("%w: record type %d at offset %d", ErrCorrupt, typ, off)
		}
		if err == nil && typ == recSegment {
			var named uint64
			if named, err = parseSegmentRecord(p); err == nil && named != id {
				err = fmt.Errorf("%w: segment %s names itself %d", ErrCorrupt, segmentName(id), named)
			}
			if errors.Is(err, ErrIncompatibleLayout) {
				return fmt.Errorf("segment %s: %w", segmentName(id), err)
			}
		} else if err == nil {
			if err = parseOp(typ, p, &j.scratch); err == nil {
				j.apply(&j.scratch, id, int64(off+recHeaderLen))
			}
		}
		if err != nil {
			bad = err
			break
		}
		off += n
	}
	if bad != nil && !last {
		return fmt.Errorf("segment %s, offset %d: %w", segmentName(id), off, bad)
	}
	if !last {
		return nil
	}
	if bad != nil {
		// The tail of the last segment was being written when the node
		// stopped, so nothing in it was acknowledged. Zero it, so that a
		// later, shorter write is not followed by its leftovers.
		j.logf("raftlog: journal segment %s: cutting a torn tail of %d bytes at offset %d: %v",
			segmentName(id), len(data)-off, off, bad)
		if err := zeroFrom(f, int64(off), int64(len(data))); err != nil {
			return err
		}
	}
	j.seg, j.segID, j.off = f, id, int64(off)
	if off == 0 {
		// Not even the opening record was written: start the segment
		// afresh, with its checkpoint.
		return j.openSegment()
	}
	return nil
}

// rollError is a segment that could not be created.
type rollError struct{ err error }

func (e *rollError) Error() string { return e.err.Error() }
func (e *rollError) Unwrap() error { return e.err }

// zeroFrom overwrites f from off to end with zeros and syncs it.
func zeroFrom(f *os.File, off, end int64) error {
	zeros := make([]byte, 1<<20)
	for off < end {
		n := min(int64(len(zeros)), end-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return fmt.Errorf("%w: %w", ErrStorage, err)
		}
		off += n
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return nil
}

func (j *Journal) logf(format string, args ...any) {
	if j.opts.Logger != nil {
		j.opts.Logger.Errorf(format, args...)
	}
}

// apply applies op, read from segment seg with its payload at offset off,
// to the index. The caller holds idx (or is Open). It never fails: every
// record that was written has a meaning (see recEntries).
func (j *Journal) apply(op *journalOp, seg uint64, off int64) {
	g := j.groups[op.group]
	if g == nil {
		if op.typ == recDeleteGroup || op.typ == recDeleteRange {
			return
		}
		g = &journalGroup{stable: map[string][]byte{}}
		j.groups[op.group] = g
	}
	switch op.typ {
	case recEntries:
		first := op.entries[0].index
		switch {
		case len(g.pos) > 0 && first >= g.first && first <= g.last()+1:
			g.pos = g.pos[:first-g.first]
		default:
			g.pos, g.first = g.pos[:0], first
		}
		for _, e := range op.entries {
			g.pos = append(g.pos, entryPos{seg: seg, off: off + int64(e.off), n: e.n})
		}
	case recStable:
		g.stable[string(op.key)] = slices.Clone(op.val)
	case recDeleteRange:
		lo, hi := max(op.lo, g.first), min(op.hi, g.last())
		switch {
		case len(g.pos) == 0 || lo > hi:
		case lo == g.first && hi == g.last():
			g.pos = nil
		case lo == g.first:
			g.pos = g.pos[hi-g.first+1:]
			g.first = hi + 1
			if cap(g.pos) > 2*len(g.pos)+64 {
				g.pos = slices.Clone(g.pos)
			}
		case hi == g.last():
			g.pos = g.pos[:lo-g.first]
		default:
			// A hole in the middle: writes refuse it (deleteRange), and
			// no record of one is ever written.
		}
	case recDeleteGroup:
		delete(j.groups, op.group)
	}
}

// newSegment creates, preallocates and syncs segment id, makes it the one
// being written and writes its opening records.
func (j *Journal) newSegment(id uint64) error {
	path := filepath.Join(j.dir, segmentName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return &rollError{fmt.Errorf("%w: %w", ErrStorage, err)}
	}
	if err := preallocate(f, j.opts.SegmentSize); err != nil {
		return &rollError{errors.Join(fmt.Errorf("%w: preallocate %s: %w", ErrStorage, path, err), f.Close(), os.Remove(path))}
	}
	if err := f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("%w: %w", ErrStorage, err), f.Close())
	}
	if err := dirsync.Sync(j.dir); err != nil {
		return errors.Join(fmt.Errorf("%w: %w", ErrStorage, err), f.Close())
	}
	j.idx.Lock()
	j.files[id] = f
	j.idx.Unlock()
	j.seg, j.segID, j.off = f, id, 0
	return j.openSegment()
}

// openSegment writes the opening records of the (empty) segment being
// written: its id, every group's stable values, and the entries of the
// groups that laggards names, so that older segments can go. Nothing else is
// needed to replay from here: an older segment is removed only once no
// group has entries in it.
func (j *Journal) openSegment() error {
	buf := appendSegmentRecord(nil, j.segID)
	j.idx.RLock()
	ids := make([]uint64, 0, len(j.groups))
	for id := range j.groups {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	copyOf := j.laggards()
	var err error
	for _, id := range ids {
		g := j.groups[id]
		keys := make([]string, 0, len(g.stable))
		for k := range g.stable {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			buf = appendStableRecord(buf, id, []byte(k), g.stable[k])
		}
		if copyOf[id] {
			if buf, err = j.appendCopy(buf, id, g); err != nil {
				break
			}
			j.copiedForward.Add(1)
		}
	}
	j.idx.RUnlock()
	if err != nil {
		return err
	}
	return j.write(buf)
}

// laggards returns the groups whose entries openSegment copies into the
// segment being opened: those whose oldest entry is copyForwardAfter
// segments back, provided that at most 1/liveShareToCopy of the segments
// before this one is live. The caller holds idx.
func (j *Journal) laggards() map[uint64]bool {
	oldest := j.segID
	for _, g := range j.groups {
		if len(g.pos) > 0 {
			oldest = min(oldest, g.pos[0].seg)
		}
	}
	if oldest+copyForwardAfter > j.segID {
		return nil
	}
	var live int64
	for _, g := range j.groups {
		for _, p := range g.pos {
			live += int64(p.n)
		}
	}
	if live*liveShareToCopy > int64(j.segID-oldest)*j.opts.SegmentSize {
		return nil
	}
	lag := map[uint64]bool{}
	for id, g := range j.groups {
		if len(g.pos) > 0 && g.pos[0].seg+copyForwardAfter <= j.segID && copyFits(g) {
			lag[id] = true
		}
	}
	return lag
}

// copyFits reports whether g's entries fit in one record. A copy must be
// one record: replayed, an entries record replaces the group's entries
// from its first index on, so a copy cut in two by a torn write would
// drop the entries after the cut. A log too large to copy keeps its
// segments instead (raft compacts a busy log long before).
func copyFits(g *journalGroup) bool {
	n := 10 // the group id
	for _, p := range g.pos {
		n += p.n + 5
		if n > maxRecordLen {
			return false
		}
	}
	return true
}

// appendCopy appends an entries record holding a copy of g's entries,
// read from their segments. The caller holds idx.
func (j *Journal) appendCopy(dst []byte, id uint64, g *journalGroup) ([]byte, error) {
	dst, at := beginRecord(dst, recEntries)
	dst = binary.AppendUvarint(dst, id)
	var e []byte
	for _, p := range g.pos {
		var err error
		if e, err = j.readAt(e[:0], p); err != nil {
			return nil, err
		}
		dst = binary.AppendUvarint(dst, uint64(len(e)))
		dst = append(dst, e...)
	}
	return finishRecord(dst, at), nil
}

// readAt appends the bytes at p to dst. The caller holds idx.
func (j *Journal) readAt(dst []byte, p entryPos) ([]byte, error) {
	f := j.files[p.seg]
	if f == nil {
		return nil, fmt.Errorf("%w: segment %d of a live entry is gone", ErrCorrupt, p.seg)
	}
	dst = slices.Grow(dst, p.n)[:p.n]
	if _, err := f.ReadAt(dst, p.off); err != nil {
		return nil, fmt.Errorf("%w: read %s at %d: %w", ErrStorage, segmentName(p.seg), p.off, err)
	}
	return dst, nil
}

// write writes buf at the end of the segment being written, syncs it and
// applies its records to the index. It rolls to a new segment first when
// buf does not fit and the segment holds more than its opening records.
// Only the flushing writer (or Open) calls it. A new segment that cannot
// be created fails with a *rollError: nothing was written.
func (j *Journal) write(buf []byte) error {
	if j.off > 0 && j.off+int64(len(buf)) > j.opts.SegmentSize && !j.opening(buf) {
		if err := j.newSegment(j.segID + 1); err != nil {
			return err
		}
		j.reap()
	}
	return j.append(buf)
}

// append writes buf at the end of the segment being written, syncs it and
// applies its records to the index.
func (j *Journal) append(buf []byte) error {
	base := j.off
	if _, err := j.seg.WriteAt(buf, base); err != nil {
		return fmt.Errorf("%w: write %s: %w", ErrStorage, segmentName(j.segID), err)
	}
	if !j.opts.NoSync {
		start := time.Now()
		if err := fdatasync(j.seg); err != nil {
			return fmt.Errorf("%w: sync %s: %w", ErrStorage, segmentName(j.segID), err)
		}
		j.fsyncs.Add(1)
		j.fsyncNanos.Add(uint64(time.Since(start)))
	}
	j.off += int64(len(buf))
	j.idx.Lock()
	defer j.idx.Unlock()
	for off := 0; off < len(buf); {
		typ, p, n, err := readRecord(buf[off:])
		if err != nil {
			return fmt.Errorf("raftlog: journal wrote a record it cannot read: %w", err)
		}
		if typ != recSegment {
			if err := parseOp(typ, p, &j.scratch); err != nil {
				return fmt.Errorf("raftlog: journal wrote a record it cannot read: %w", err)
			}
			j.apply(&j.scratch, j.segID, base+int64(off+recHeaderLen))
		}
		off += n
	}
	return nil
}

// opening reports whether buf is a segment's opening records (written by
// openSegment, which must not roll again however long they are).
func (j *Journal) opening(buf []byte) bool {
	typ, _, _, err := readRecord(buf)
	return err == nil && typ == recSegment
}

// reap closes and removes the segments older than every group's oldest
// entry. The segment being written stays.
func (j *Journal) reap() {
	j.idx.Lock()
	keep := j.segID
	for _, g := range j.groups {
		if len(g.pos) > 0 {
			keep = min(keep, g.pos[0].seg)
		}
	}
	var gone []uint64
	for id, f := range j.files {
		if id < keep {
			f.Close()
			delete(j.files, id)
			gone = append(gone, id)
		}
	}
	j.idx.Unlock()
	for _, id := range gone {
		// A segment that could not be removed is harmless: it replays
		// before the newer ones, which supersede it.
		if err := os.Remove(filepath.Join(j.dir, segmentName(id))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			j.logf("raftlog: journal: remove %s: %v", segmentName(id), err)
		}
		j.reaped.Add(1)
	}
	if len(gone) > 0 {
		if err := dirsync.Sync(j.dir); err != nil {
			j.logf("raftlog: journal: sync %s: %v", j.dir, err)
		}
	}
}

// commit appends rec (whole records) to the pending buffer and returns once
// it is durable: written and synced by this caller, or by another that
// flushed it along with its own.
func (j *Journal) commit(rec []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	if j.err != nil {
		return j.err
	}
	j.pending = append(j.pending, rec...)
	j.queued++
	mine := j.queued
	for j.durable < mine {
		if j.err != nil {
			return j.err
		}
		if j.closed {
			return ErrClosed
		}
		if mine <= j.failedUpto {
			return j.rollErr
		}
		if j.flushing {
			j.cond.Wait()
			continue
		}
		j.flushing = true
		buf, upto := j.pending, j.queued
		j.pending = j.spare[:0]
		j.mu.Unlock()
		err := j.write(buf)
		j.mu.Lock()
		j.spare = buf[:0]
		j.flushing = false
		var roll *rollError
		switch {
		case errors.As(err, &roll):
			j.rollErr, j.failedUpto = roll.err, upto
		case err != nil:
			j.err = err
		default:
			j.durable = upto
		}
		j.cond.Broadcast()
		if j.durable < mine && mine <= j.failedUpto {
			return j.rollErr
		}
	}
	return nil
}

// Close waits for a write in progress and closes the segment files.
// Operations started afterwards return ErrClosed. Closing a closed Journal
// returns nil.
func (j *Journal) Close() error {
	j.mu.Lock()
	for j.flushing {
		j.cond.Wait()
	}
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.cond.Broadcast()
	j.mu.Unlock()
	return j.closeFiles()
}

func (j *Journal) closeFiles() error {
	j.idx.Lock()
	defer j.idx.Unlock()
	var errs []error
	for id, f := range j.files {
		if err := f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%w: close %s: %w", ErrStorage, segmentName(id), err))
		}
		delete(j.files, id)
	}
	j.groups = map[uint64]*journalGroup{}
	return errors.Join(errs...)
}

// WriteStats returns the journal's write statistics so far.
func (j *Journal) WriteStats() WriteStats {
	return WriteStats{
		Writes:    j.writes.writes.Load(),
		Entries:   j.writes.entries.Load(),
		WriteTime: time.Duration(j.writes.nanos.Load()),
		Fsyncs:    j.fsyncs.Load(),
		FsyncTime: time.Duration(j.fsyncNanos.Load()),
	}
}

// Group returns the log and stable store of Raft group id.
func (j *Journal) Group(id uint64) *JournalGroup { return &JournalGroup{j: j, id: id} }

// DeleteGroup removes every log entry and stable key of group id, durably.
// Raft must no longer be running on the group.
func (j *Journal) DeleteGroup(id uint64) error {
	return j.commit(appendDeleteGroupRecord(nil, id))
}
