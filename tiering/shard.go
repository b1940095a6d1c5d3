package tiering

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

// Shard is the cold tier of one shard, a keyspace.ColdTier.
//
// Concurrency: the writer methods (Put, Delete, Purge, Flush, Wipe,
// Snapshot, Restore) must be called by one goroutine at a time, the state
// machine's. Get, Lookup and Stats may be called concurrently with them and
// with each other: a lookup sees the writes buffered since the last Flush,
// or, when none are buffered, the database.
//
// Failures: the keyspace.ColdTier methods cannot return errors. A read that
// fails is retried with backoff (and reported through Health and
// Options.OnError) until it succeeds; on a closed Store or a value that does
// not decode they panic, as the state machine cannot go on without the
// record. Callers that can handle errors (stale reads, the CLI) use Lookup.
type Shard struct {
	store *Store
	id    uint32

	// mu guards the fields below: the writer holds it for each call, a
	// lookup while it reads the pending batch.
	mu    sync.Mutex
	batch *pebble.Batch // writes since the last Flush; nil when none
	gen   byte          // the generation whose keys are live
	// purgeFloor is at or below the deadline of every purge index entry,
	// so that Purge seeks past the tombstones its earlier calls left.
	purgeFloor int64
	scratch    []byte // value encoding buffer

	stats counters
	// countExact is set once Wipe has emptied the shard: from then on
	// stats.keys counts its records exactly (Put, Delete, Purge and Restore
	// keep it), so a count of 0 answers lookups without a probe. A shard
	// reopened with records on disk and not wiped has no exact count.
	countExact atomic.Bool
}

var _ keyspace.ColdTier = (*Shard)(nil)

func newShard(s *Store, id uint32, gen byte) *Shard {
	return &Shard{store: s, id: id, gen: gen, purgeFloor: math.MinInt64}
}

// ID returns the shard id.
func (s *Shard) ID() uint32 { return s.id }

// Stats returns the shard's counters.
func (s *Shard) Stats() ShardStats { return s.stats.snapshot() }

// Get returns the record held for d. The Result is a fresh copy. See the
// type's documentation for failures.
func (s *Shard) Get(d digest.Digest) (keyspace.ColdRecord, bool) {
	var rec keyspace.ColdRecord
	var ok bool
	err := s.store.retry(sourceForeground, func() error {
		var err error
		rec, ok, err = s.Lookup(d)
		return err
	})
	if err != nil {
		panic(err)
	}
	return rec, ok
}

// Lookup is Get with an error instead of a retry or a panic.
func (s *Shard) Lookup(d digest.Digest) (keyspace.ColdRecord, bool, error) {
	s.stats.lookups.Add(1)
	if s.countExact.Load() && s.stats.keys.Load() == 0 {
		// Nothing demoted (or all purged): the common case of a young or
		// small grid costs no Pebble probe. The count covers pending
		// writes too.
		return keyspace.ColdRecord{}, false, nil
	}
	var k [recordKeyLen]byte
	var rec keyspace.ColdRecord
	decode := func(v []byte) error {
		var err error
		rec, err = decodeValue(v)
		return err
	}
	var ok bool
	lookup := func(r pebble.Reader, key []byte) error {
		start := time.Now()
		var err error
		ok, err = s.probe(r, key, decode)
		s.stats.observe(time.Since(start))
		return err
	}
	s.mu.Lock()
	key := recordKey(&k, s.id, s.gen, d)
	var err error
	if b := s.batch; b != nil {
		err = s.store.db.With(func(*pebble.DB) error { return lookup(b, key) })
		s.mu.Unlock()
	} else {
		s.mu.Unlock()
		err = s.store.db.With(func(db *pebble.DB) error { return lookup(db, key) })
	}
	if err != nil || !ok {
		return keyspace.ColdRecord{}, false, err
	}
	s.stats.hits.Add(1)
	return rec, true, nil
}

// probe looks key up in r and, when found, calls fn with its value, which
// is valid only during the call. The caller holds the store (a batch reads
// through into the database).
//
// It seeks a prefix iterator with UseL6Filters rather than calling Get:
// Pebble's Get never consults the bloom filters of the bottom level (L6),
// where most records live once compacted, so a miss would read an L6 data
// block; with the filters it costs filter probes of cached filter blocks.
func (s *Shard) probe(r pebble.Reader, key []byte, fn func(v []byte) error) (bool, error) {
	it, err := r.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return false, fmt.Errorf("%w: shard %d: get: %w", ErrStorage, s.id, err)
	}
	ok := it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key)
	if ok {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(v)
		}
		if err != nil {
			it.Close()
			if !errors.Is(err, ErrCorrupt) {
				err = fmt.Errorf("%w: shard %d: get: %w", ErrStorage, s.id, err)
			}
			return false, err
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return false, fmt.Errorf("%w: shard %d: get: %w", ErrStorage, s.id, err)
	}
	return ok, nil
}

// batchLocked returns the pending batch, starting one if needed. It panics
// on a closed store.
func (s *Shard) batchLocked() *pebble.Batch {
	if s.batch == nil {
		err := s.store.db.With(func(db *pebble.DB) error {
			s.batch = db.NewIndexedBatch()
			return nil
		})
		if err != nil {
			panic(fmt.Errorf("shard %d: %w", s.id, err))
		}
	}
	return s.batch
}

// dropBatchLocked discards the pending batch.
func (s *Shard) dropBatchLocked() {
	if s.batch != nil {
		_ = s.batch.Close()
		s.batch = nil
	}
}

// must panics on the error of a batch mutation, which Pebble only returns
// for misuse.
func must(err error) {
	if err != nil {
		panic(fmt.Errorf("%w: batch: %w", ErrStorage, err))
	}
}

// Put stores r for d, which the shard does not hold. The write is buffered
// until Flush and visible to Get at once.
func (s *Shard) Put(d digest.Digest, r *keyspace.ColdRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batchLocked()
	var rk [recordKeyLen]byte
	var xk [expiryKeyLen]byte
	var ak [auditKeyLen]byte
	s.scratch = encodeValue(s.scratch[:0], r)
	must(b.Set(recordKey(&rk, s.id, s.gen, d), s.scratch, nil))
	must(b.Set(expiryKey(&xk, s.id, s.gen, r.Deadline, d), nil, nil))
	must(b.Set(auditKey(&ak, s.id, s.gen, d.NamespaceTag(), r.CompletedAt(), d), nil, nil))
	s.purgeFloor = min(s.purgeFloor, r.Deadline)
	s.stats.puts.Add(1)
	s.stats.keys.Add(1)
	s.stats.bytes.Add(recordBytes(len(s.scratch)))
}

// Delete removes the record of d with its index entries. Deleting a digest
// the shard does not hold does nothing.
func (s *Shard) Delete(d digest.Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removeLocked(d, nil) {
		s.stats.deletes.Add(1)
	}
}

// removeLocked deletes the record of d and its index entries, reading the
// record for the index keys. It reports whether there was a record. When
// keep is set and returns true for the record's deadline, it deletes
// nothing (Purge uses it to skip a record whose deadline is not the one
// of the index entry that led to it).
func (s *Shard) removeLocked(d digest.Digest, keep func(deadline int64) bool) bool {
	b := s.batchLocked()
	var rk [recordKeyLen]byte
	key := recordKey(&rk, s.id, s.gen, d)
	var deadline, completedAt int64
	var size int
	meta := func(v []byte) error {
		var err error
		deadline, completedAt, err = valueMeta(v)
		size = len(v)
		return err
	}
	var ok bool
	err := s.store.retry(sourceForeground, func() error {
		return s.store.db.With(func(*pebble.DB) error {
			var err error
			ok, err = s.probe(b, key, meta)
			return err
		})
	})
	if err != nil {
		panic(fmt.Errorf("shard %d digest %v: %w", s.id, d, err))
	}
	if !ok || keep != nil && keep(deadline) {
		return false
	}
	var xk [expiryKeyLen]byte
	var ak [auditKeyLen]byte
	must(b.Delete(key, nil))
	must(b.Delete(expiryKey(&xk, s.id, s.gen, deadline, d), nil))
	must(b.Delete(auditKey(&ak, s.id, s.gen, d.NamespaceTag(), completedAt, d), nil))
	s.stats.keys.Add(-1)
	s.stats.bytes.Add(-recordBytes(size))
	return true
}

// Flush commits the writes buffered since the last Flush, without syncing
// (see the package documentation). It returns an error only when the store
// closes before the commit succeeds.
func (s *Shard) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked()
}

func (s *Shard) flushLocked() error {
	b := s.batch
	if b == nil {
		return nil
	}
	if !b.Empty() {
		if err := s.store.commit(b); err != nil {
			return fmt.Errorf("shard %d: flush: %w", s.id, err)
		}
	}
	s.dropBatchLocked()
	return nil
}

// Wipe removes every record of the shard, including writes not flushed.
func (s *Shard) Wipe() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropBatchLocked()
	lo, hi := shardBounds(s.id)
	if err := s.store.deleteRange(lo, hi); err != nil {
		return fmt.Errorf("shard %d: wipe: %w", s.id, err)
	}
	s.gen = 0
	s.purgeFloor = math.MinInt64
	s.stats.keys.Store(0)
	s.countExact.Store(true)
	s.stats.bytes.Store(0)
	return nil
}

// commit commits b, retrying as retry does. A batch whose commit failed
// cannot be committed again, so each retry commits a copy; b itself stays
// readable until the caller closes it.
func (s *Store) commit(b *pebble.Batch) error {
	cur := b
	return s.retry(sourceForeground, func() error {
		return s.db.With(func(db *pebble.DB) error {
			if cur == nil {
				cur = db.NewBatch()
				if err := cur.Apply(b, nil); err != nil {
					return fmt.Errorf("%w: copy batch: %w", ErrStorage, err)
				}
			}
			err := cur.Commit(pebble.NoSync)
			if cur != b {
				_ = cur.Close()
			}
			if err != nil {
				cur = nil
				return fmt.Errorf("%w: commit: %w", ErrStorage, err)
			}
			return nil
		})
	})
}

// deleteRange deletes the keys in [lo, hi) and commits at once.
func (s *Store) deleteRange(lo, hi []byte) error {
	return s.retry(sourceForeground, func() error {
		return s.db.With(func(db *pebble.DB) error {
			if err := db.DeleteRange(lo, hi, pebble.NoSync); err != nil {
				return fmt.Errorf("%w: delete range: %w", ErrStorage, err)
			}
			return nil
		})
	})
}
