package tiering

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/l4xg/grid/internal/snapio"
)

// Snapshot stream format (integers big-endian): the shard's keys of all
// three kinds in key order, without their shard and generation prefix, so
// that Restore can write them straight into sstables and ingest those.
//
//	magic "L4XGCLD2"
//	entries, in strictly ascending (kind, rest) order:
//	  'a' nsTag(2) completedAt(8) digest(16)        audit index entry
//	  'r' digest(16) valueLen u32 (>= 32) value     record
//	  'x' deadline(8) digest(16)                    purge index entry
//	end marker: byte 0
//	record count u64
//	CRC-32C (Castagnoli) u32 of every byte before it
//
// The count trails the entries so that writing needs no counting pass.
// Carrying the index entries costs 52 bytes a record and saves Restore a
// sort: it checks them against the records instead (see restore.go).
//
// WriteWithFiles writes the same stream with magic "L4XGCLD3" followed by
// a reference to the local sstable copies of the snapshot (files.go):
//
//	id length u8 (1..255), id (the snapshot's id, a directory name)
//	nonce [16]byte (random; the files' manifest holds the same)
//
// and then entries and trailer as above, the CRC covering the reference.
var (
	coldSnapshotMagic     = [8]byte{'L', '4', 'X', 'G', 'C', 'L', 'D', '2'}
	coldSnapshotMagicRefs = [8]byte{'L', '4', 'X', 'G', 'C', 'L', 'D', '3'}
)

// filesRef is the reference a stream carries to its local sstable copies.
type filesRef struct {
	id    string
	nonce [16]byte
}

// entryLen is the length of an entry's key after its kind byte.
func entryLen(kind byte) int {
	switch kind {
	case kindAudit:
		return auditKeyLen - prefixLen
	case kindRecord:
		return recordKeyLen - prefixLen
	case kindExpiry:
		return expiryKeyLen - prefixLen
	}
	return -1
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ShardSnapshot is a point-in-time view of one shard's cold tier, taken in
// O(1) (a Pebble snapshot) and streamed by WriteTo while the shard keeps
// applying. Close it when done: until then Pebble keeps the versions it
// needs, so obsolete data is not reclaimed by compactions.
type ShardSnapshot struct {
	store *Store
	shard uint32
	gen   byte
	err   error // why the snapshot could not be taken

	mu   sync.Mutex
	snap *pebble.Snapshot // nil once closed
}

// Snapshot flushes the pending writes and captures the shard's records.
// It does no I/O beyond the flush (a memtable write).
func (s *Shard) Snapshot() *ShardSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := &ShardSnapshot{store: s.store, shard: s.id, gen: s.gen}
	if err := s.flushLocked(); err != nil {
		ss.err = fmt.Errorf("snapshot: %w", err)
		return ss
	}
	ss.err = s.store.db.With(func(db *pebble.DB) error {
		ss.snap = db.NewSnapshot()
		return nil
	})
	return ss
}

// Close releases the snapshot. It is safe to call more than once, and
// after the Store has closed.
func (ss *ShardSnapshot) Close() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	snap := ss.snap
	if snap == nil {
		return nil
	}
	ss.snap = nil
	err := ss.store.db.With(func(*pebble.DB) error { return snap.Close() })
	if errors.Is(err, ErrClosed) {
		return nil // the snapshot went with the database
	}
	return err
}

// WriteTo streams every record of the snapshot to w in the format above. It
// gives up with ErrClosed when the Store starts closing.
func (ss *ShardSnapshot) WriteTo(w io.Writer) (int64, error) {
	return ss.write(w, nil, nil)
}

// write streams the snapshot to w; with ref, in the format that carries
// it, and with fw, writing every entry into fw's sstables as well, in the
// same scan. A failure of fw does not stop the stream (see WriteWithFiles).
func (ss *ShardSnapshot) write(w io.Writer, ref *filesRef, fw *filesWriter) (int64, error) {
	if ss.err != nil {
		return 0, ss.err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.snap == nil {
		return 0, fmt.Errorf("tiering: snapshot closed")
	}
	sw := snapio.NewWriter(w)
	if ref == nil {
		sw.Raw(coldSnapshotMagic[:])
	} else {
		sw.Raw(coldSnapshotMagicRefs[:])
		sw.Raw([]byte{byte(len(ref.id))})
		sw.Raw([]byte(ref.id))
		sw.Raw(ref.nonce[:])
	}
	var count uint64
	err := ss.store.db.With(func(*pebble.DB) error {
		lo, hi := genBounds(ss.shard, ss.gen)
		it, err := ss.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return fmt.Errorf("%w: snapshot iterator: %w", ErrStorage, err)
		}
		for ok := it.First(); ok && sw.Err == nil; ok = it.Next() {
			if count%1024 == 0 && ss.store.isClosing() {
				return errors.Join(ErrClosed, it.Close())
			}
			k := it.Key()
			if len(k) < prefixLen || len(k)-prefixLen != entryLen(k[prefixLen-1]) {
				return errors.Join(fmt.Errorf("%w: key %x", ErrCorrupt, k), it.Close())
			}
			sw.Raw(k[prefixLen-1:])
			if k[prefixLen-1] != kindRecord {
				fw.add(k, nil)
				continue
			}
			v, err := it.ValueAndErr()
			if err != nil || len(v) < valueHeaderLen {
				return errors.Join(fmt.Errorf("%w: record %x (%d bytes): %w", ErrCorrupt, k, len(v), err), it.Close())
			}
			sw.U32(uint32(len(v)))
			sw.Raw(v)
			fw.add(k, v)
			count++
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return fmt.Errorf("%w: snapshot scan: %w", ErrStorage, err)
		}
		return nil
	})
	if err != nil {
		return sw.Written(), err
	}
	sw.Raw([]byte{0})
	sw.U64(count)
	return sw.Finish()
}

func (s *Store) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}
