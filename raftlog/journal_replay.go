package raftlog

import (
	"errors"
	"fmt"
	"io"
)

// replayer carries what replay learns from one segment to the next.
type replayer struct {
	nextSeq   uint64 // the sequence number the next frame must have
	haveSeq   bool   // nextSeq is known: a frame was read
	version   byte   // the format of the last segment read
	lastFrame int64  // where the last frame read begins, in its segment
	buf       []byte // holds the segment being read; see replay

	// How far replay has come, for reservePos: the bytes of the segments
	// read before this one, this one's size, and an estimate of the bytes
	// of the segments still to read.
	before, size, after int64
}

// replay applies segment id's frames (or, in a format-1 segment, records)
// to the index. The last segment becomes the one written next, from the
// end of its last frame.
func (j *Journal) replay(r *replayer, id uint64, last bool) error {
	name := segmentName(id)
	f, err := j.fs.Open(j.path(name))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	j.files[id] = f
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrStorage, name, err)
	}
	// Every segment is read into the same buffer, grown when a segment is
	// larger: a fresh slice per segment cost a clear of 64 MiB each. Reuse
	// is safe because nothing replay keeps refers to the buffer: the index
	// holds entries as positions in the files (entryPos), apply copies
	// stable keys and values, and open clears j.scratch, whose slices point
	// into it. The slice's capacity is its length, as a fresh one's, so
	// that no slicing reaches the bytes of an earlier segment.
	if int64(cap(r.buf)) < size {
		r.buf = make([]byte, size)
	}
	data := r.buf[:size:size]
	r.before, r.size = r.before+r.size, size
	// A read that stops short of the size fstat gave fails the open: the
	// bytes it did not return may hold acknowledged frames, and replay
	// must not take them for the zeros of preallocated space.
	n, err := f.ReadAt(data, 0)
	if n < len(data) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: read %s: %d of its %d bytes: %w", ErrStorage, name, n, size, err)
	}
	if recordsFormat(data) {
		r.version, r.haveSeq = journalVersionRecords, false
		return j.replayRecords(r, id, f, data, last)
	}
	r.version = journalVersion
	return j.replayFrames(r, id, f, data, last)
}

// replayFrames replays a segment of frames. Every frame must be whole and
// valid and carry the sequence number due, and only zeros may follow the
// last one. Where that fails, the bytes from there on are damage to
// acknowledged data (ErrCorrupt), unless they can be the write a crash
// interrupted: in the last segment, with no valid frame after them and
// the shape of a torn write (tornShape). Such a tail was never
// acknowledged: it is cut off, zeroed and logged.
func (j *Journal) replayFrames(r *replayer, id uint64, f journalFile, data []byte, last bool) error {
	name := segmentName(id)
	off := 0
	var bad error
	for off < len(data) {
		if allZero(data[off:min(off+frameHeaderLen, len(data))]) {
			break
		}
		h, ok := validFrame(data[off:], id)
		if !ok {
			bad = fmt.Errorf("%w: damaged frame", ErrCorrupt)
			break
		}
		if r.haveSeq && h.seq != r.nextSeq {
			bad = fmt.Errorf("%w: frame %d where frame %d was due", ErrCorrupt, h.seq, r.nextSeq)
			break
		}
		body := data[off+frameHeaderLen : off+frameHeaderLen+h.bodyLen]
		if err := j.replayBody(r, body, id, int64(off+frameHeaderLen), off == 0); err != nil {
			// A whole frame whose checksums hold: not a torn write.
			return fmt.Errorf("segment %s, frame at offset %d: %w", name, off, err)
		}
		r.nextSeq, r.haveSeq, r.lastFrame = h.seq+1, true, int64(off)
		off += h.frameLen()
	}
	if off == 0 && !last {
		return fmt.Errorf("%w: segment %s holds no frame, though newer segments follow", ErrCorrupt, name)
	}
	tail := off + nonZeroLen(data[off:])
	if bad == nil && tail > off {
		bad = fmt.Errorf("%w: %d bytes that are not zero follow the last frame", ErrCorrupt, tail-off)
	}
	if bad != nil {
		if !last {
			return fmt.Errorf("segment %s, offset %d: %w", name, off, bad)
		}
		if at := findFrame(data, off+1, id, r); at >= 0 {
			return fmt.Errorf("segment %s, offset %d: %w; the valid frame at offset %d after it holds acknowledged writes", name, off, bad, at)
		}
		if !tornShape(data, off, id) {
			return fmt.Errorf("segment %s, offset %d: %w, and not in the shape of a torn write: every sector of it was written", name, off, bad)
		}
		j.logf("raftlog: journal segment %s: cutting a torn tail of %d bytes at offset %d: %v", name, tail-off, off, bad)
		if err := zeroRange(f, int64(off), int64(tail)); err != nil {
			return err
		}
	}
	if last {
		j.seg, j.segID, j.off = f, id, int64(off)
	}
	return nil
}

// replayBody applies the records of a frame's body, which lies at offset
// base of segment id. The first frame of a segment opens with the record
// naming it, and no other record names a segment.
func (j *Journal) replayBody(r *replayer, body []byte, id uint64, base int64, opening bool) error {
	for off := 0; off < len(body); {
		typ, p, n, err := readRecord(body[off:])
		if errors.Is(err, errEndOfRecords) {
			err = fmt.Errorf("%w: a zero record header inside a frame", ErrCorrupt)
		}
		if err == nil && (opening && off == 0) != (typ == recSegment) {
			err = fmt.Errorf("%w: record type %d at offset %d of the frame", ErrCorrupt, typ, off)
		}
		if err != nil {
			return err
		}
		if typ == recSegment {
			named, version, err := parseSegmentRecord(p)
			if err != nil {
				return err
			}
			if named != id || version != journalVersion {
				return fmt.Errorf("%w: segment %s names itself %d, format %d", ErrCorrupt, segmentName(id), named, version)
			}
		} else {
			if err := parseOp(typ, p, &j.scratch); err != nil {
				return err
			}
			j.reservePos(r, &j.scratch, base+int64(off))
			j.apply(&j.scratch, id, base+int64(off+recHeaderLen))
		}
		off += n
	}
	return nil
}

// findFrame returns the offset of the first valid frame at or after from
// in segment id's data that can follow what r has read (any frame, when r
// has read none), or -1.
func findFrame(data []byte, from int, id uint64, r *replayer) int {
	for at := from; at+frameHeaderLen+frameTrailerLen <= len(data); at++ {
		if [4]byte(data[at:at+4]) != frameMagic {
			continue
		}
		if h, ok := validFrame(data[at:], id); ok && (!r.haveSeq || h.seq >= r.nextSeq) {
			return at
		}
	}
	return -1
}

// tornShape reports whether the bytes at off, where a frame was due, can
// be a write that a crash cut short: a write whose sectors reached the
// disk in part. The space after a segment's last frame is zeros
// (preallocated, never reused, and zeroed at open after a cut), and each
// sector a frame touches holds some of its bytes that are not zero (the
// frame's first and last bytes never are), so a torn frame has a sector
// whose part of the frame reads as zeros, or runs past the end of the
// file. A frame whose every sector was written but does not check is
// damage, not a torn write.
func tornShape(data []byte, off int, id uint64) bool {
	end := min(off+frameHeaderLen, len(data))
	if h, ok := readFrameHeader(data[off:], id); ok {
		if off+h.frameLen() > len(data) {
			return true
		}
		end = off + h.frameLen()
	}
	for s := off &^ (sectorSize - 1); s < end; s += sectorSize {
		if allZero(data[max(s, off):min(s+sectorSize, end)]) {
			return true
		}
	}
	return false
}

// replayRecords replays a segment of format 1, records without frames,
// with that format's rules: the records end at the first all-zero header;
// a bad record at the end of the last segment is a torn tail, cut and
// zeroed; one anywhere else fails the open. The journal writes no more to
// such a segment: it starts a new one after it.
func (j *Journal) replayRecords(r *replayer, id uint64, f journalFile, data []byte, last bool) error {
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
			if named, _, err = parseSegmentRecord(p); err == nil && named != id {
				err = fmt.Errorf("%w: segment %s names itself %d", ErrCorrupt, segmentName(id), named)
			}
		} else if err == nil {
			if err = parseOp(typ, p, &j.scratch); err == nil {
				j.reservePos(r, &j.scratch, int64(off))
				j.apply(&j.scratch, id, int64(off+recHeaderLen))
			}
		}
		if err != nil {
			bad = err
			break
		}
		off += n
	}
	if bad == nil {
		return nil
	}
	if !last {
		return fmt.Errorf("segment %s, offset %d: %w", segmentName(id), off, bad)
	}
	j.logf("raftlog: journal segment %s: cutting a torn tail of %d bytes at offset %d: %v",
		segmentName(id), len(data)-off, off, bad)
	return zeroRange(f, int64(off), int64(len(data)))
}

// reservePos makes room in the index of op's group for op's entries,
// before apply appends them in replay; op's record lies at offset off of
// the segment being read. Replay grows an index to the size it will have
// at the end, projected from how far replay has come (posCap): append
// alone grew a large one by a quarter at a time, copying and allocating
// it five times over in a journal of a few groups.
func (j *Journal) reservePos(r *replayer, op *journalOp, off int64) {
	g := j.groups[op.group]
	if op.typ != recEntries || g == nil {
		return
	}
	kept := g.kept(op.entries[0].index)
	need := kept + len(op.entries)
	if need <= cap(g.pos) {
		return
	}
	done, left := r.before+off, max(r.size-off, 0)+r.after
	pos := make([]entryPos, kept, posCap(kept, cap(g.pos), need, done, left))
	copy(pos, g.pos[:kept])
	g.pos = pos
}

// posCap is the capacity for an index that keeps n entries of a slice of
// capacity c and needs room for need, after done bytes of the journal were
// replayed and with about left bytes to go. It is the size the index will
// have at the end, if the group goes on taking entries as it did, and an
// eighth more; but at least a quarter more than c (twice c while c is
// small), as append grows a slice, and at most twice c: a projection
// early in a journal, or for a group that stopped writing, can be far too
// large, and doubling keeps what growing allocates in all to about twice
// the final size.
func posCap(n, c, need int, done, left int64) int {
	lo, hi := c+c/4, 2*c
	if c < 256 {
		lo = hi
	}
	proj := float64(need)
	if done > 0 {
		proj += float64(n) * float64(left) / float64(done)
	}
	proj *= 1.125
	if proj < float64(hi) {
		hi = int(proj)
	}
	return max(need, lo, hi)
}

// recordsFormat reports whether data is a segment of format 1: one that
// opens with a record (not a frame) naming a segment of that format.
func recordsFormat(data []byte) bool {
	typ, p, _, err := readRecord(data)
	if err != nil || typ != recSegment {
		return false
	}
	_, version, err := parseSegmentRecord(p)
	return err == nil && version == journalVersionRecords
}

// zeroRange overwrites f from off to end with zeros and syncs it.
func zeroRange(f journalFile, off, end int64) error {
	zeros := make([]byte, min(1<<20, end-off))
	for off < end {
		n := min(int64(len(zeros)), end-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return fmt.Errorf("%w: %w", ErrStorage, err)
		}
		off += n
	}
	if err := f.SyncData(); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return nil
}

// nonZeroLen returns the length of b up to and including its last byte
// that is not zero.
func nonZeroLen(b []byte) int {
	end := len(b)
	for end > 0 && allZero(b[max(end-zeroBlock, 0):end]) {
		end = max(end-zeroBlock, 0)
	}
	for end > 0 && b[end-1] == 0 {
		end--
	}
	return end
}
