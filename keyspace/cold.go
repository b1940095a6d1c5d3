package keyspace

import "github.com/l4xg/grid/digest"

// ColdTier is the lower tier of settled records (docs/design.md section 4):
// COMPLETED and POISONED records leave the hot table for it once the hot
// window has passed or the hot table is over its budget, and lookups that
// miss the hot table fall through to it. A digest is never held by both
// tiers.
//
// The Machine calls a ColdTier only from Apply (and Get), in log order, so a
// cold tier that applies Put, Delete and Purge in call order holds the same
// records on every replica. Writes may be buffered until the caller of Apply
// flushes them, but Get must see every earlier Put and Delete. Implementations
// do the I/O; the Machine stays free of it.
type ColdTier interface {
	// Get returns the record held for d. The record's Result may alias the
	// tier's buffers: the Machine copies what it keeps.
	Get(d digest.Digest) (ColdRecord, bool)
	// Put stores r for d; d is not held yet.
	Put(d digest.Digest, r *ColdRecord)
	// Delete removes the record of d, which is held.
	Delete(d digest.Digest)
	// Purge removes at most limit records whose Deadline is at or before
	// now, oldest first, and returns how many it removed.
	Purge(now int64, limit int) int
}

// ColdRecord is a settled record with its out-of-line data, as the cold tier
// keeps it.
type ColdRecord struct {
	Record
	Fingerprint uint64 // meaningful when HasFingerprint
	Result      []byte // nil when the record holds none
}

// HasFingerprint reports whether the record carries a payload fingerprint.
func (r *ColdRecord) HasFingerprint() bool { return r.has(flagFingerprint) }
