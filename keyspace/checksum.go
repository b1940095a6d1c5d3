package keyspace

import (
	"encoding/binary"

	farm "github.com/dgryski/go-farm"

	"github.com/l4xg/grid/digest"
)

// Checksum is a digest of a machine's hot state: what every replica that
// applied the same entries must agree on. Replicas at the same applied index
// with different checksums have diverged.
type Checksum struct {
	// Sum combines a hash of each live record (with its side data) and of
	// each live entity version, by addition: it does not depend on the
	// order they are visited in.
	Sum uint64
	// Records and Entities are how many went into Sum.
	Records, Entities int
}

// Checksum returns the checksum of the hot tier at the machine's stamp.
// Records gone at the stamp are left out, as lookups leave them out (the
// sweep reclaims them later), and so are the counters of Stats, which a
// snapshot does not carry. The cold tier is not in it: it lives in the
// cold store, and the shard reports its key count beside the checksum. It
// reads every hot record: O(records), for checks, not for the hot path.
func (m *Machine) Checksum() Checksum {
	var c Checksum
	buf := make([]byte, 0, 128)
	m.table.Range(func(d digest.Digest, r Record) bool {
		if r.gone(m.now) {
			return true
		}
		buf = m.appendRecordState(buf[:0], d, r)
		c.Sum += farm.Hash64(buf)
		c.Records++
		return true
	})
	for d, ev := range m.entities.all() {
		if ev.deadline <= m.now {
			continue
		}
		buf = append(d.Append(append(buf[:0], 'e')), 0)
		buf = binary.LittleEndian.AppendUint64(buf, ev.version)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(ev.deadline))
		c.Sum += farm.Hash64(buf)
		c.Entities++
	}
	return c
}

// appendRecordState appends what the record of d means: the record and the
// side data its flags say it has.
func (m *Machine) appendRecordState(b []byte, d digest.Digest, r Record) []byte {
	b = d.Append(append(b, 'r'))
	b = binary.LittleEndian.AppendUint64(b, r.Token)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Deadline))
	b = binary.LittleEndian.AppendUint64(b, r.Meta)
	if r.has(flagFingerprint) {
		fp, _ := m.fingerprints.get(d)
		b = binary.LittleEndian.AppendUint64(b, fp)
	}
	if r.has(flagResult) {
		res, _ := m.results.get(d)
		b = binary.AppendUvarint(b, uint64(len(res)))
		b = append(b, res...)
	}
	if r.has(flagEntity) {
		ref, _ := m.pending.get(d)
		b = ref.entity.Append(b)
		b = binary.LittleEndian.AppendUint64(b, ref.version)
	}
	if r.has(flagRequestID) {
		id, _ := m.requestIDs.get(d)
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	return b
}
