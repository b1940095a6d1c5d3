package keyspace

import "github.com/l4xg/grid/digest"

// held looks up the record a settle (Complete, Fail, Release, Extend) acts
// on and returns its digest; it notes for Result.Found whether it found
// one. In an entry with a token layout a settle need not name the entity
// its key was reserved with (digest.Record takes the slot bits of such a key
// from the entity): the same key under other slot bits on this shard is the
// same key placed by another entity, or by none. In order, it is:
//
//   - the record of c.Digest when it holds c.Token;
//   - else the key's record under other slot bits that holds c.Token;
//   - else the record of c.Digest (a LEASE_LOST, a Release of a key nobody
//     holds);
//   - else, when c.Digest has none, the key's record under other slot bits,
//     the lowest first, so that a lost token gets the answer it would get
//     with the entity named (LEASE_LOST, not a Release's OK).
//
// In an entry without a layout (written before settles did this) it is the
// record of c.Digest alone, as it was then.
//
// The token decides: a shard grants each token once, so at most one record
// holds it, and the choice depends on the records held, never on the
// table's layout. The search of other placements is the probe run of one
// home slot, made only when the exact record does not hold the token. It
// does not reach the cold tier, which holds only settled records: a settle
// repeated without the entity after its record moved there answers as if
// the record were gone.
func (m *Machine) held(c *Command, now int64) (digest.Digest, Record, bool) {
	d, rec, had := m.heldRecord(c, now)
	m.found = had
	return d, rec, had
}

func (m *Machine) heldRecord(c *Command, now int64) (digest.Digest, Record, bool) {
	d := c.Digest
	rec, had := m.lookup(d, now)
	if had && rec.Token == c.Token || !m.placements {
		return d, rec, had
	}
	alt, holds, first, placed := m.table.placements(d, c.Token)
	found := m.coldHit // lookup below must not forget d's cold record
	m.coldHit = coldLookup{}
	if holds && alt != d {
		if r, ok := m.lookup(alt, now); ok {
			return alt, r, true
		}
	}
	if !had && placed {
		if r, ok := m.lookup(first, now); ok {
			return first, r, true
		}
	}
	m.coldHit = found
	return d, rec, had
}
