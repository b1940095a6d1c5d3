package tiering

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/l4xg/grid/digest"
)

// Purge removes at most limit records whose Deadline is at or before now,
// earliest deadline first, with their index entries, and returns how many
// it removed. It walks the purge index, so its cost follows the records it
// removes, not the records held.
func (s *Shard) Purge(now int64, limit int) int {
	if limit <= 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now < s.purgeFloor {
		return 0
	}
	b := s.batchLocked()
	var due []dueEntry
	var last int64
	err := s.store.retry(sourceForeground, func() error {
		var err error
		due, last, err = s.dueLocked(b, now, limit)
		return err
	})
	if err != nil {
		panic(fmt.Errorf("shard %d: purge: %w", s.id, err))
	}
	n := 0
	for _, e := range due {
		if s.removeLocked(e.d, func(deadline int64) bool { return deadline != e.deadline }) {
			n++
			continue
		}
		// An index entry without its record (or with a record of another
		// deadline, which only a Put over a held digest, outside the
		// ColdTier contract, leaves behind): drop it, or it stays due.
		var xk [expiryKeyLen]byte
		must(b.Delete(expiryKey(&xk, s.id, s.gen, e.deadline, e.d), nil))
	}
	// Every entry left is due after now, or (limit reached) not before the
	// last one removed.
	switch {
	case len(due) == limit:
		s.purgeFloor = last
	case now < maxTime:
		s.purgeFloor = now + 1
	}
	s.stats.purged.Add(uint64(n))
	return n
}

type dueEntry struct {
	d        digest.Digest
	deadline int64
}

// dueLocked lists up to limit digests of the purge index due at now, in
// index order, and the deadline of the last one. It reads through the
// pending batch b.
func (s *Shard) dueLocked(b *pebble.Batch, now int64, limit int) ([]dueEntry, int64, error) {
	var due []dueEntry
	var last int64
	err := s.store.db.With(func(*pebble.DB) error {
		var lk [expiryKeyLen]byte
		lo := expiryKey(&lk, s.id, s.gen, s.purgeFloor, digest.Digest{})
		_, hi := kindBounds(s.id, s.gen, kindExpiry)
		it, err := b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return fmt.Errorf("%w: purge iterator: %w", ErrStorage, err)
		}
		for ok := it.First(); ok && len(due) < limit; ok = it.Next() {
			k := it.Key()
			if len(k) != expiryKeyLen {
				return errors.Join(fmt.Errorf("%w: purge index key %x", ErrCorrupt, k), it.Close())
			}
			deadline := unsortable(binary.BigEndian.Uint64(k[prefixLen:]))
			if deadline > now {
				break
			}
			due = append(due, dueEntry{getDigest(k[prefixLen+8:]), deadline})
			last = deadline
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return fmt.Errorf("%w: purge scan: %w", ErrStorage, err)
		}
		return nil
	})
	return due, last, err
}
