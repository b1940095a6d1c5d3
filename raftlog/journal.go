package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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

	// fs is the file system; nil means the real one. Tests set it.
	fs journalFS
	// afterSync, if set, is told of every frame synced (its segment and
	// where it ends) before its writers are: the crash model's child
	// reports what is durable through it.
	afterSync func(seg uint64, end int64)
}

func (o JournalOptions) withDefaults() JournalOptions {
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.fs == nil {
		o.fs = osFS{}
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
// in one sequence of preallocated segment files. It replaced a Pebble
// database (see the package documentation). Writers from any group append
// records to one pending frame; whichever writer finds no write in
// progress writes the whole frame with one write and one fdatasync (group
// commit) and wakes the others, each with its frame's result. The index
// (where each entry is, and the stable values) is in memory and rebuilt by
// replaying the segments at open; entries are read back with pread. See
// doc.go.
type Journal struct {
	dir  string
	opts JournalOptions
	fs   journalFS
	lock io.Closer // the directory's lock, held until Close

	// mu guards the pending frame and the commit state.
	mu       sync.Mutex
	cond     sync.Cond
	pending  *flush // the frame writers append to; nil when none
	free     []byte // the buffer of the last frame written, for the next
	flushing bool   // a writer is writing and syncing a frame
	closed   bool
	// err is the first write or sync failure: what the page cache holds
	// can no longer be trusted, so every later write fails with it.
	err error

	// Owned by the writer that is flushing (flushing == true), or by Open
	// and Close.
	seg     journalFile // the segment being written
	segID   uint64
	off     int64  // where the next frame goes in seg
	zeroed  int64  // seg is written (zeros included) up to here (zeroAhead)
	zeros   []byte // zeroAhead bytes of zeros, made at the first use
	nextSeq uint64 // the sequence number of the next frame
	doomed  []uint64
	scratch journalOp

	// idx guards the index and the open segment files. The flushing writer
	// takes it to apply what it synced; readers share it, also while they
	// read a segment, so a segment is not closed under them. groups is nil
	// once the journal is closed.
	idx    sync.RWMutex
	groups map[uint64]*journalGroup
	files  map[uint64]journalFile // segment id -> file, every live segment

	space spareSegment

	// readBufs and encodeBufs hold *[]byte buffers for GetLog and
	// StoreLogs.
	readBufs, encodeBufs sync.Pool

	writes                writeCounters
	fsyncs, fsyncNanos    atomic.Uint64
	copiedForward, reaped atomic.Uint64
}

// flush is one frame: the records of the writers that joined it, written
// with one write and one sync. Its writers all return its result.
type flush struct {
	frame []byte // frameHeaderLen bytes of room for the header, then records
	done  bool
	err   error
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

// kept returns how many of g's entries stay when entries from index first
// on are appended (see recEntries): those before first, when first lies
// in [g.first, g.last()+1]; else none.
func (g *journalGroup) kept(first uint64) int {
	if len(g.pos) > 0 && first >= g.first && first <= g.last()+1 {
		return int(first - g.first)
	}
	return 0
}

const segmentSuffix = ".seg"

func segmentName(id uint64) string { return fmt.Sprintf("%016x%s", id, segmentSuffix) }

func (j *Journal) path(name string) string { return filepath.Join(j.dir, name) }

// OpenJournal opens or creates the journal in directory dir, which it
// locks against other processes until Close. It replays every segment:
// what a crash left of the last write (a torn tail) is cut off and
// logged, while damage to anything that was acknowledged fails the open
// with ErrCorrupt, and a segment that reads back shorter than its size
// with ErrStorage (see doc.go, What survives a crash).
func OpenJournal(dir string, opts JournalOptions) (*Journal, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	fs := opts.fs
	if err := fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	lock, err := fs.Lock(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: journal %s: %w", ErrLocked, dir, err)
	}
	j := &Journal{dir: dir, opts: opts, fs: fs, lock: lock, groups: map[uint64]*journalGroup{}, files: map[uint64]journalFile{}}
	j.cond.L = &j.mu
	j.readBufs.New = func() any { return new([]byte) }
	j.encodeBufs.New = func() any { return new([]byte) }
	if err := j.open(); err != nil {
		return nil, errors.Join(err, j.closeFiles(), lock.Close())
	}
	return j, nil
}

// open replays the segments and readies the journal for writing: the last
// segment goes on from the end of its last frame, after that frame is
// written and synced again (see recover); a journal without one starts
// its first.
func (j *Journal) open() error {
	ids, err := j.listSegments()
	if err != nil {
		return err
	}
	var r replayer
	for i, id := range ids {
		r.after = int64(len(ids)-1-i) * j.opts.SegmentSize
		if err := j.replay(&r, id, i == len(ids)-1); err != nil {
			return err
		}
	}
	// The last record replayed left its key and value in j.scratch, in
	// replay's buffer: drop them, and the buffer with them.
	j.scratch = journalOp{entries: j.scratch.entries[:0]}
	j.nextSeq = max(r.nextSeq, 1)
	switch {
	case len(ids) == 0:
		err = j.newSegment(1)
	case r.version != journalVersion:
		// Never append frames to a segment of the older format.
		err = j.newSegment(ids[len(ids)-1] + 1)
	case j.off == 0:
		// Not even the opening frame was written: start the segment
		// afresh, with its checkpoint.
		err = j.openSegment()
	default:
		err = j.recover(r.lastFrame)
	}
	if err != nil {
		return err
	}
	j.space.init(j)
	return nil
}

// recover writes the last frame of the segment being written again, from
// what replay read, and syncs it. After a failed fdatasync the journal
// refused every write, but the page cache may still hold the frame that
// failed to reach the disk; replay read it from there, and the frames
// appended next must not follow a frame that a power loss would then take
// away. Written again, the disk holds what the index says.
func (j *Journal) recover(lastFrame int64) error {
	if j.opts.NoSync || lastFrame >= j.off {
		return nil
	}
	frame := make([]byte, j.off-lastFrame)
	if _, err := j.seg.ReadAt(frame, lastFrame); err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrStorage, segmentName(j.segID), err)
	}
	if _, err := j.seg.WriteAt(frame, lastFrame); err != nil {
		return fmt.Errorf("%w: write %s: %w", ErrStorage, segmentName(j.segID), err)
	}
	if err := j.seg.SyncData(); err != nil {
		return fmt.Errorf("%w: sync %s: %w", ErrStorage, segmentName(j.segID), err)
	}
	return nil
}

// listSegments returns the ids of the journal's segments, in order. They
// must follow each other: the journal removes old segments oldest first,
// so a gap means a segment was lost.
func (j *Journal) listSegments() ([]uint64, error) {
	names, err := j.fs.List(j.dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	var ids []uint64
	for _, n := range names {
		name, ok := strings.CutSuffix(n, segmentSuffix)
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(name, 16, 64)
		if err != nil || len(name) != 16 || id == 0 {
			return nil, fmt.Errorf("%w: unexpected file %s in the journal", ErrCorrupt, n)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			return nil, fmt.Errorf("%w: segment %s is missing between %s and %s",
				ErrCorrupt, segmentName(ids[i-1]+1), segmentName(ids[i-1]), segmentName(ids[i]))
		}
	}
	return ids, nil
}

// rollError is a segment that could not be created: nothing was written.
type rollError struct{ err error }

func (e *rollError) Error() string { return e.err.Error() }
func (e *rollError) Unwrap() error { return e.err }

func (j *Journal) logf(format string, args ...any) {
	if j.opts.Logger != nil {
		j.opts.Logger.Errorf(format, args...)
	}
}

// apply applies op, read from segment seg with its payload at offset off,
// to the index. The caller holds idx (or is Open). It never fails: every
// record that was written has a meaning (see recEntries). op's key and
// value point into a buffer its caller reuses (replay's, a frame's): apply
// copies what it keeps.
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
		kept := g.kept(first)
		g.pos, g.first = g.pos[:kept], first-uint64(kept)
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

// newSegment makes segment id the one being written, from the spare
// segment when there is one (so that a full disk does not stop the
// journal at once) and else from a new file, preallocated and synced, and
// writes its opening frame. A segment that cannot be made fails with a
// *rollError: nothing was written.
func (j *Journal) newSegment(id uint64) error {
	name := j.path(segmentName(id))
	f, err := j.space.take(j, name)
	if err != nil {
		return &rollError{err}
	}
	if f == nil {
		if f, err = j.fs.Create(name); err != nil {
			return &rollError{fmt.Errorf("%w: %w", ErrStorage, err)}
		}
		err = f.Preallocate(j.opts.SegmentSize)
		if err == nil {
			err = f.SyncData()
		}
		if err != nil {
			return &rollError{errors.Join(fmt.Errorf("%w: preallocate %s: %w", ErrStorage, name, err), f.Close(), j.fs.Remove(name))}
		}
	}
	if err := j.fs.SyncDir(j.dir); err != nil {
		return errors.Join(fmt.Errorf("%w: %w", ErrStorage, err), f.Close())
	}
	j.idx.Lock()
	j.files[id] = f
	j.idx.Unlock()
	j.seg, j.segID, j.off, j.zeroed = f, id, 0, 0
	return j.openSegment()
}

// openSegment writes the opening frame of the (empty) segment being
// written: its id, every group's stable values, and the entries of the
// groups that laggards names, so that older segments can go. Nothing else
// is needed to replay from here: an older segment is removed only once no
// group has entries in it.
func (j *Journal) openSegment() error {
	buf := appendSegmentRecord(make([]byte, frameHeaderLen), j.segID)
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
	return j.append(buf)
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

// write writes frame at the end of the segment being written, syncs it and
// applies its records to the index. It rolls to a new segment first when
// the frame does not fit. Only the flushing writer calls it. A new
// segment that cannot be made fails with a *rollError: nothing was
// written.
func (j *Journal) write(frame []byte) error {
	if j.off > 0 && j.off+int64(len(frame)+frameTrailerLen) > j.opts.SegmentSize {
		if err := j.newSegment(j.segID + 1); err != nil {
			return err
		}
		j.reap()
		j.space.make(j)
	}
	return j.append(frame)
}

// append writes frame (header room, then records) at the end of the
// segment being written as the next frame, syncs it and applies its
// records to the index.
func (j *Journal) append(frame []byte) error {
	frame = finishFrame(frame, j.segID, j.nextSeq)
	base := j.off
	if _, err := j.seg.WriteAt(frame, base); err != nil {
		return fmt.Errorf("%w: write %s: %w", ErrStorage, segmentName(j.segID), err)
	}
	if err := j.zeroAhead(base + int64(len(frame))); err != nil {
		return err
	}
	if !j.opts.NoSync {
		start := time.Now()
		if err := j.seg.SyncData(); err != nil {
			return fmt.Errorf("%w: sync %s: %w", ErrStorage, segmentName(j.segID), err)
		}
		j.fsyncs.Add(1)
		j.fsyncNanos.Add(uint64(time.Since(start)))
	}
	j.off += int64(len(frame))
	j.nextSeq++
	if j.opts.afterSync != nil && !j.opts.NoSync {
		j.opts.afterSync(j.segID, j.off)
	}
	body := frame[frameHeaderLen : len(frame)-frameTrailerLen]
	base += frameHeaderLen
	j.idx.Lock()
	defer j.idx.Unlock()
	for off := 0; off < len(body); {
		typ, p, n, err := readRecord(body[off:])
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

// zeroAheadBytes is how far past the frame being written zeroAhead
// writes zeros.
const zeroAheadBytes = 64 << 10

// zeroAhead writes zeros into the segment being written from end, where
// the frame just written ends, up to zeroAheadBytes further (or the
// segment's preallocated end), once the frames have passed what was
// written before. Preallocated space is allocated but never written, and
// the file system records the first write into it as a change of the
// file's extents (ext4's unwritten extents): written into by every frame,
// each frame's fdatasync would commit that change to the file system's
// journal too. Zeroed ahead, only the fdatasync that flushes the zeros
// does. PostgreSQL zero-fills its WAL segments for the same reason
// (wal_init_zero). Only zeros follow the last frame either way, as replay
// requires. The zeros go out with the fdatasync of the frame that wrote
// them, so they are kept short: 64 KiB cost no tail latency where 1 MiB
// tripled the p99 (BenchmarkJournalStoreLogsSync; bench/README.md).
func (j *Journal) zeroAhead(end int64) error {
	if j.opts.NoSync || end <= j.zeroed || end >= j.opts.SegmentSize {
		return nil
	}
	to := min(end+zeroAheadBytes, j.opts.SegmentSize)
	if j.zeros == nil {
		j.zeros = make([]byte, zeroAheadBytes)
	}
	if _, err := j.seg.WriteAt(j.zeros[:to-end], end); err != nil {
		return fmt.Errorf("%w: write zeros to %s: %w", ErrStorage, segmentName(j.segID), err)
	}
	j.zeroed = to
	return nil
}

// reap closes the segments older than every group's oldest entry and
// removes them from disk, oldest first. A removal that fails stops the
// round, and the next one starts from it again: a newer segment never goes
// before an older one, so the segments on disk always follow each other
// and replay never brings back what a newer segment deleted. The segment
// being written stays.
func (j *Journal) reap() {
	j.idx.Lock()
	keep := j.segID
	for _, g := range j.groups {
		if len(g.pos) > 0 {
			keep = min(keep, g.pos[0].seg)
		}
	}
	var gone []uint64
	for id := range j.files {
		if id < keep {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		j.files[id].Close()
		delete(j.files, id)
	}
	j.idx.Unlock()
	j.doomed = append(j.doomed, gone...)
	removed := 0
	for _, id := range j.doomed {
		if err := j.fs.Remove(j.path(segmentName(id))); err != nil && !isNotExist(err) {
			j.logf("raftlog: journal: remove %s (retried at the next segment): %v", segmentName(id), err)
			break
		}
		removed++
		j.reaped.Add(1)
	}
	j.doomed = j.doomed[removed:]
	if removed > 0 {
		if err := j.fs.SyncDir(j.dir); err != nil {
			j.logf("raftlog: journal: sync %s: %v", j.dir, err)
		}
	}
}

// commit appends rec (whole records) to the pending frame and returns that
// frame's result once it is written and synced, by this caller or by
// another that flushed it along with its own. A frame that failed fails
// exactly its writers: a later frame's success says nothing of it. grows
// says whether rec holds log entries, which are refused while the journal
// has no room for its next segment (spareSegment).
func (j *Journal) commit(rec []byte, grows bool) error {
	if grows {
		if err := j.space.room(j); err != nil {
			return err
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	if j.err != nil {
		return j.err
	}
	if j.pending == nil {
		j.pending = &flush{frame: append(j.free[:0], make([]byte, frameHeaderLen)...)}
		j.free = nil
	}
	f := j.pending
	f.frame = append(f.frame, rec...)
	for !f.done {
		switch {
		case j.err != nil:
			return j.err
		case j.closed:
			return ErrClosed
		case j.flushing:
			j.cond.Wait()
		default:
			// f is the pending frame: nobody is writing, and f is not done.
			j.flushing, j.pending = true, nil
			j.mu.Unlock()
			err := j.write(f.frame)
			j.mu.Lock()
			j.free, f.frame = f.frame[:0], nil
			j.flushing = false
			f.done, f.err = true, err
			var roll *rollError
			if err != nil && !errors.As(err, &roll) {
				j.err = err
			}
			j.cond.Broadcast()
		}
	}
	return f.err
}

// Close waits for a write in progress, closes the segment files and
// releases the directory. Operations started afterwards return ErrClosed.
// Closing a closed Journal returns nil.
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
	j.space.close()
	return errors.Join(j.closeFiles(), j.lock.Close())
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
	j.groups = nil
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
	return j.commit(appendDeleteGroupRecord(nil, id), false)
}
