package keyspace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/snapio"
)

// Snapshot is a point-in-time copy of a Machine's hot state that can be
// written out while the machine keeps applying entries. Taking it costs
// O(segments + side map parts), whatever the number of records: the hot
// table is shared copy-on-write at segment granularity and the side maps at
// part granularity. The cold tier is not part of it: its owner snapshots it.
type Snapshot struct {
	view         *TableView
	fingerprints sideMap[uint64]
	results      sideMap[[]byte] // values are never mutated once stored
	pending      sideMap[entityRef]
	requestIDs   sideMap[uint64]
	entities     sideMap[entityVersion]
	policy       TierPolicy
	now          int64
	cursor       uint64
	ticks        uint64
}

// Snapshot captures the machine's state. Call Release when done with it.
func (m *Machine) Snapshot() *Snapshot {
	return &Snapshot{
		view:         m.table.Snapshot(),
		fingerprints: m.fingerprints.share(),
		results:      m.results.share(),
		pending:      m.pending.share(),
		requestIDs:   m.requestIDs.share(),
		entities:     m.entities.share(),
		policy:       m.policy,
		now:          m.now,
		cursor:       m.cursor,
		ticks:        m.ticks,
	}
}

// Release lets the machine stop copying table segments for this snapshot.
func (s *Snapshot) Release() { s.view.Release() }

// SnapshotBufferSize is the read buffer ReadSnapshot wants (see there).
const SnapshotBufferSize = snapio.BufferSize

// The snapshot format's magic, whose last byte is its version. Version 3
// added the request ids of PROCESSING records, after the entity versions;
// ReadSnapshot still reads version 2, which has none.
var (
	snapshotMagic   = [8]byte{'L', '4', 'X', 'G', 'S', 'N', 'P', '3'}
	snapshotMagicV2 = [8]byte{'L', '4', 'X', 'G', 'S', 'N', 'P', '2'}
)

// ErrCorruptSnapshot is returned when snapshot bytes do not decode.
var ErrCorruptSnapshot = errors.New("keyspace: corrupt snapshot")

// WriteTo streams the snapshot to w, ending with a CRC-32C of all bytes.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	sw := &snapWriter{snapio.NewWriter(w)}
	sw.Raw(snapshotMagic[:])
	sw.U64(uint64(s.now))
	sw.U64(s.cursor)
	sw.U64(s.ticks)
	sw.U64(uint64(s.policy.HotWindow))
	sw.U64(uint64(s.policy.HotMaxBytes))
	// Segment sizes first, so a restored table has the same layout and the
	// sweep cursor points at the same slots as on every other replica.
	sw.U64(uint64(s.view.Len()))
	levels := s.view.capLevels()
	sw.U64(uint64(len(levels)))
	for _, l := range levels {
		sw.U64(uint64(l))
	}
	s.view.Range(func(d digest.Digest, r Record) bool {
		sw.digest(d)
		sw.U64(r.Token)
		sw.U64(uint64(r.Deadline))
		sw.U64(r.Meta)
		return sw.Err == nil
	})
	sw.U64(uint64(s.fingerprints.len()))
	for d, fp := range s.fingerprints.all() {
		sw.digest(d)
		sw.U64(fp)
	}
	sw.U64(uint64(s.results.len()))
	for d, res := range s.results.all() {
		sw.digest(d)
		sw.U64(uint64(len(res)))
		sw.Raw(res)
	}
	sw.U64(uint64(s.pending.len()))
	for d, ref := range s.pending.all() {
		sw.digest(d)
		sw.digest(ref.entity)
		sw.U64(ref.version)
	}
	sw.U64(uint64(s.entities.len()))
	for e, ev := range s.entities.all() {
		sw.digest(e)
		sw.U64(ev.version)
		sw.U64(uint64(ev.deadline))
	}
	sw.U64(uint64(s.requestIDs.len()))
	for d, id := range s.requestIDs.all() {
		sw.digest(d)
		sw.U64(id)
	}
	return sw.Finish()
}

// snapWriter writes the machine's snapshot fields onto a checksummed stream.
type snapWriter struct{ *snapio.Writer }

func (sw *snapWriter) digest(d digest.Digest) {
	sw.U64(d.Hi)
	sw.U64(d.Lo)
}

// ReadSnapshot builds a fresh Machine from a snapshot written by WriteTo. The
// caller swaps it in only when this returns without error. Given a
// *bufio.Reader of at least SnapshotBufferSize bytes, it reads exactly the
// snapshot's bytes, so whatever follows them in the stream stays readable;
// another reader may be read past the snapshot's end.
func ReadSnapshot(r io.Reader) (*Machine, error) {
	sr := &snapReader{snapio.NewReader(r, SnapshotBufferSize, ErrCorruptSnapshot)}
	var magic [8]byte
	sr.Raw(magic[:])
	if sr.Err == nil && magic != snapshotMagic && magic != snapshotMagicV2 {
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorruptSnapshot, magic[:])
	}
	m := NewMachine()
	m.now = int64(sr.U64())
	m.cursor = sr.U64()
	m.ticks = sr.U64()
	m.policy = TierPolicy{HotWindow: int64(sr.U64()), HotMaxBytes: int64(sr.U64())}
	if err := m.policy.Validate(); sr.Err == nil && err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
	}
	records := sr.count(40)
	levels := make([]uint32, sr.count(1<<30))
	for i := range levels {
		levels[i] = uint32(sr.U64())
	}
	// Records come segment by segment. Each segment is gathered, then
	// built at its recorded level in one pass (allocation follows the input
	// actually read); segments without records get their level afterwards.
	var seg []tabSlot
	cur := -1
	load := func() error {
		if cur < 0 {
			return nil
		}
		if levels[cur] == 0 {
			return fmt.Errorf("segment %d holds %d records but has no array", cur, len(seg))
		}
		return m.table.load(cur, levels[cur]-1, seg)
	}
	var raw [40]byte
	for n := records; n > 0 && sr.Err == nil; n-- {
		if sr.Raw(raw[:]); sr.Err != nil {
			break
		}
		be := binary.BigEndian
		d := digest.Digest{Hi: be.Uint64(raw[0:]), Lo: be.Uint64(raw[8:])}
		rec := Record{Token: be.Uint64(raw[16:]), Deadline: int64(be.Uint64(raw[24:])), Meta: be.Uint64(raw[32:])}
		if s := rec.State(); s < Processing || s > Poisoned {
			return nil, fmt.Errorf("%w: record %v has state %d", ErrCorruptSnapshot, d, s)
		}
		if si := tabSegOf(d); si != cur {
			if si < cur {
				return nil, fmt.Errorf("%w: record %v of segment %d after segment %d", ErrCorruptSnapshot, d, si, cur)
			}
			if err := load(); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
			}
			cur, seg = si, seg[:0]
		}
		seg = append(seg, tabSlot{d, rec})
		m.counts[rec.State()]++
	}
	if sr.Err != nil {
		return nil, sr.Err
	}
	if err := load(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
	}
	if err := m.table.relevel(levels); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
	}
	for n := sr.count(24); n > 0 && sr.Err == nil; n-- {
		d := sr.digest()
		m.fingerprints.set(d, sr.U64())
	}
	for n := sr.count(24); n > 0 && sr.Err == nil; n-- {
		d := sr.digest()
		size := sr.U64()
		if size > digest.MaxResultLen {
			return nil, fmt.Errorf("%w: result of %d bytes", ErrCorruptSnapshot, size)
		}
		res := make([]byte, size)
		sr.Raw(res)
		m.results.set(d, res)
		m.resultBytes += int64(len(res))
	}
	for n := sr.count(40); n > 0 && sr.Err == nil; n-- {
		d := sr.digest()
		m.pending.set(d, entityRef{entity: sr.digest(), version: sr.U64()})
	}
	for n := sr.count(32); n > 0 && sr.Err == nil; n-- {
		e := sr.digest()
		ev := entityVersion{version: sr.U64(), deadline: int64(sr.U64())}
		m.entities.set(e, ev)
		m.expiring.push(ev.deadline, e)
	}
	if magic == snapshotMagic {
		for n := sr.count(24); n > 0 && sr.Err == nil; n-- {
			d := sr.digest()
			m.requestIDs.set(d, sr.U64())
		}
	}
	if err := sr.Verify(); err != nil {
		return nil, err
	}
	return m, nil
}

// snapReader reads the machine's snapshot fields from a checksummed stream.
type snapReader struct{ *snapio.Reader }

func (sr *snapReader) digest() digest.Digest {
	hi := sr.U64()
	return digest.Digest{Hi: hi, Lo: sr.U64()}
}

// count reads an element count, refusing absurd values before allocating.
func (sr *snapReader) count(elemSize uint64) uint64 {
	n := sr.U64()
	if sr.Err == nil && n > 1<<40/elemSize {
		sr.Err = fmt.Errorf("%w: count %d", ErrCorruptSnapshot, n)
		return 0
	}
	return n
}
