package tiering

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

// AuditFunc receives one record of an audit; returning false stops it.
type AuditFunc func(shard uint32, d digest.Digest, r keyspace.ColdRecord) bool

// Audit calls fn for every record of every shard whose digest carries
// namespace tag nsTag and whose completed-at time t is in [since, until),
// shard by shard in ascending id, and by completed-at time within a shard.
// Distinct namespaces may share a tag: the caller filters by digest when it
// knows the keys. Audit reads a consistent snapshot of the flushed records;
// writes still pending in a Shard are not seen. fn runs with the store held
// and must not call Close; Audit stops with ErrClosed when Close starts.
func (s *Store) Audit(nsTag uint16, since, until int64, fn AuditFunc) error {
	if since >= until {
		return nil
	}
	gens := s.liveGens()
	return s.db.With(func(db *pebble.DB) error {
		snap := db.NewSnapshot()
		defer snap.Close()
		probe, err := snap.NewIter(nil)
		if err != nil {
			return fmt.Errorf("%w: audit iterator: %w", ErrStorage, err)
		}
		defer probe.Close()
		for ok := probe.First(); ok; {
			k := probe.Key()
			if len(k) < prefixLen {
				return fmt.Errorf("%w: key %x", ErrCorrupt, k)
			}
			shard := binary.BigEndian.Uint32(k)
			gen, known := gens[shard]
			if !known {
				gen = k[4]
			}
			more, err := s.auditShard(snap, shard, gen, nsTag, since, until, fn)
			if err != nil || !more {
				return err
			}
			_, next := shardBounds(shard)
			if shard == ^uint32(0) {
				break
			}
			ok = probe.SeekGE(next)
		}
		return probe.Error()
	})
}

// auditShard runs the audit over one shard; it reports whether to go on.
func (s *Store) auditShard(snap *pebble.Snapshot, shard uint32, gen byte, tag uint16, since, until int64, fn AuditFunc) (bool, error) {
	var lk, hk [auditKeyLen]byte
	lo := auditKey(&lk, shard, gen, tag, since, digest.Digest{})
	hi := auditKey(&hk, shard, gen, tag, until, digest.Digest{})
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, fmt.Errorf("%w: audit iterator: %w", ErrStorage, err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%1024 == 0 && s.isClosing() {
			return false, errors.Join(ErrClosed, it.Close())
		}
		k := it.Key()
		if len(k) != auditKeyLen {
			return false, errors.Join(fmt.Errorf("%w: audit key %x", ErrCorrupt, k), it.Close())
		}
		d := getDigest(k[prefixLen+10:])
		var rk [recordKeyLen]byte
		v, closer, err := snap.Get(recordKey(&rk, shard, gen, d))
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, errors.Join(fmt.Errorf("%w: audit get: %w", ErrStorage, err), it.Close())
		}
		r, err := decodeValue(v)
		closer.Close()
		if err != nil {
			return false, errors.Join(err, it.Close())
		}
		if r.CompletedAt() != unsortable(binary.BigEndian.Uint64(k[prefixLen+2:])) {
			continue // a stale entry (see Purge); the record has its own
		}
		if !fn(shard, d, r) {
			return false, it.Close()
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return false, fmt.Errorf("%w: audit scan: %w", ErrStorage, err)
	}
	return true, nil
}

// liveGens returns the live generation of every shard with a handle.
func (s *Store) liveGens() map[uint32]byte {
	s.shardsMu.Lock()
	handles := make([]*Shard, 0, len(s.shards))
	for _, sh := range s.shards {
		handles = append(handles, sh)
	}
	s.shardsMu.Unlock()
	gens := make(map[uint32]byte, len(handles))
	for _, sh := range handles {
		sh.mu.Lock()
		gens[sh.id] = sh.gen
		sh.mu.Unlock()
	}
	return gens
}
