package tiering

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/l4xg/grid/keyspace"
)

// restoreBatchBytes is the size at which Restore commits a batch.
const restoreBatchBytes = 4 << 20

// Restore replaces the shard's records with those of a stream written by
// ShardSnapshot.WriteTo. The records are loaded into the shard's other
// generation and the shard switches to it only once the whole stream has
// been read and verified; on any error (wrapping ErrCorruptSnapshot for bad
// input) the shard keeps its previous records, including the writes that
// were pending, which Restore flushes first. r is read through a bufio.Reader (r itself when it is one of at
// least 64 KiB), which may read past the end of the stream: frame the
// stream when more data follows it.
func (s *Shard) Restore(r io.Reader) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.flushLocked(); err != nil {
		return fmt.Errorf("shard %d: restore: %w", s.id, err)
	}
	next := s.gen ^ 1
	lo, hi := genBounds(s.id, next)
	if err := s.store.deleteRange(lo, hi); err != nil {
		return fmt.Errorf("shard %d: restore: %w", s.id, err)
	}
	keys, size, err := s.load(r, next)
	if err != nil {
		// Best effort: a leftover generation is deleted by the next
		// Restore or Wipe, and is never read.
		_ = s.store.deleteRange(lo, hi)
		return fmt.Errorf("shard %d: restore: %w", s.id, err)
	}
	old := s.gen
	s.gen = next
	s.purgeFloor = math.MinInt64
	s.stats.keys.Store(keys)
	s.stats.bytes.Store(size)
	lo, hi = genBounds(s.id, old)
	if err := s.store.deleteRange(lo, hi); err != nil {
		return fmt.Errorf("shard %d: restore: drop old records: %w", s.id, err)
	}
	return nil
}

// load writes the records of the stream into generation gen, in batches,
// and returns their count and logical size.
func (s *Shard) load(r io.Reader, gen byte) (keys, size int64, err error) {
	sr := &snapReader{r: bufio.NewReaderSize(r, 64<<10), crc: crc32.New(castagnoli)}
	var magic [8]byte
	sr.raw(magic[:])
	if sr.err == nil && magic != coldSnapshotMagic {
		return 0, 0, fmt.Errorf("%w: bad magic %q", ErrCorruptSnapshot, magic[:])
	}
	l := loader{s: s, gen: gen}
	defer l.close()
	var prev, digest [16]byte
	value := make([]byte, 0, valueHeaderLen+keyspace.MaxResultLen)
	for n := 0; sr.err == nil; n++ {
		vlen := sr.u32()
		if sr.err != nil || vlen == 0 {
			break
		}
		if vlen < valueHeaderLen || vlen > valueHeaderLen+keyspace.MaxResultLen {
			return 0, 0, fmt.Errorf("%w: record %d: value of %d bytes", ErrCorruptSnapshot, n, vlen)
		}
		sr.raw(digest[:])
		value = value[:vlen]
		sr.raw(value)
		if sr.err != nil {
			break
		}
		if n > 0 && bytes.Compare(digest[:], prev[:]) <= 0 {
			return 0, 0, fmt.Errorf("%w: record %d: digests out of order", ErrCorruptSnapshot, n)
		}
		prev = digest
		if err := l.add(getDigest(digest[:]), value); err != nil {
			return 0, 0, err
		}
	}
	count := sr.u64()
	want := sr.crc.Sum32()
	got := sr.u32()
	if sr.err != nil {
		return 0, 0, sr.err
	}
	if got != want {
		return 0, 0, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorruptSnapshot, got, want)
	}
	if count != uint64(l.keys) {
		return 0, 0, fmt.Errorf("%w: %d records, trailer says %d", ErrCorruptSnapshot, l.keys, count)
	}
	if err := l.commit(); err != nil {
		return 0, 0, err
	}
	return l.keys, l.size, nil
}

// loader writes restored records in batches of restoreBatchBytes.
type loader struct {
	s    *Shard
	gen  byte
	b    *pebble.Batch
	keys int64
	size int64
}

func (l *loader) add(d keyspace.Digest, value []byte) error {
	r, err := decodeValue(value[:valueHeaderLen])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
	}
	if st := r.State(); st < keyspace.Processing || st > keyspace.Poisoned {
		return fmt.Errorf("%w: record %v has state %d", ErrCorruptSnapshot, d, st)
	}
	if l.b == nil {
		if err := l.s.store.with(func(db *pebble.DB) error {
			l.b = db.NewBatchWithSize(restoreBatchBytes + restoreBatchBytes/4)
			return nil
		}); err != nil {
			return err
		}
	}
	var rk [recordKeyLen]byte
	var xk [expiryKeyLen]byte
	var ak [auditKeyLen]byte
	id := l.s.id
	must(l.b.Set(recordKey(&rk, id, l.gen, d), value, nil))
	must(l.b.Set(expiryKey(&xk, id, l.gen, r.Deadline, d), nil, nil))
	must(l.b.Set(auditKey(&ak, id, l.gen, d.NamespaceTag(), r.CompletedAt(), d), nil, nil))
	l.keys++
	l.size += recordBytes(len(value))
	if l.b.Len() >= restoreBatchBytes {
		return l.commit()
	}
	return nil
}

func (l *loader) commit() error {
	if l.b == nil {
		return nil
	}
	err := l.s.store.commit(l.b)
	l.close()
	return err
}

func (l *loader) close() {
	if l.b != nil {
		_ = l.b.Close()
		l.b = nil
	}
}

type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	err error
	buf [8]byte
}

func (sr *snapReader) raw(b []byte) {
	if sr.err != nil {
		return
	}
	if _, err := io.ReadFull(sr.r, b); err != nil {
		sr.err = fmt.Errorf("%w: truncated: %w", ErrCorruptSnapshot, err)
		return
	}
	sr.crc.Write(b)
}

func (sr *snapReader) u32() uint32 {
	sr.raw(sr.buf[:4])
	if sr.err != nil {
		return 0
	}
	return binary.BigEndian.Uint32(sr.buf[:4])
}

func (sr *snapReader) u64() uint64 {
	sr.raw(sr.buf[:])
	if sr.err != nil {
		return 0
	}
	return binary.BigEndian.Uint64(sr.buf[:])
}
