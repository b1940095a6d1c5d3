package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/snapio"
	"github.com/l4xg/grid/keyspace"
)

// Restore replaces the shard's records with those of a stream written by
// ShardSnapshot.WriteTo or WriteWithFiles. The stream is written into
// sstables of the shard's other generation, which are ingested, and the
// shard switches to that generation, only once the whole stream has been
// read and verified; on any error (wrapping ErrCorruptSnapshot for bad
// input) the shard keeps its previous records, including the writes that
// were pending, which Restore flushes first. r is read through a
// bufio.Reader (r itself when it is one of at least 64 KiB), which may read
// past the end of the stream: frame the stream when more data follows it.
func (s *Shard) Restore(r io.Reader) error { return s.RestoreWithFiles(r, "") }

// RestoreWithFiles is Restore, except that when the stream refers to
// snapshot files (WriteWithFiles) that dir holds, intact, it ingests those
// instead of reading the records: links to them, so that they stay for the
// next restart, and in O(files). It then reads no further than the
// stream's reference, so the rest of r is left unread and unverified: the
// caller must trust r as far as the reference goes (Raft's snapshot store
// checks the whole file when it opens it). Files that are missing, of
// another snapshot or damaged (the stream's nonce, each file's size and
// CRC-32C are checked first), or that cannot be ingested, make it read the
// stream as Restore does. Stats counts which way each restore went.
func (s *Shard) RestoreWithFiles(r io.Reader, dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.flushLocked(); err != nil {
		return fmt.Errorf("shard %d: restore: %w", s.id, err)
	}
	sr := &snapReader{snapio.NewReader(r, 64<<10, ErrCorruptSnapshot)}
	ref, err := sr.header()
	if err != nil {
		return fmt.Errorf("shard %d: restore: %w", s.id, err)
	}
	if ref != nil && dir != "" {
		start := time.Now()
		err := s.restoreFilesLocked(dir, ref)
		if err == nil {
			s.stats.fileRestores.Add(1)
			s.store.log.Info("cold tier restored from local snapshot files", "shard", s.id, "snapshot", ref.id,
				"records", s.stats.keys.Load(), "took", time.Since(start))
			return nil
		}
		level := slog.LevelWarn
		if errors.Is(err, ErrNoSnapshotFiles) {
			level = slog.LevelInfo
		}
		s.store.log.Log(context.Background(), level, "restoring the cold tier from the stream, not the local files",
			"shard", s.id, "snapshot", ref.id, "reason", err)
	}
	next := s.gen ^ 1
	lo, hi := genBounds(s.id, next)
	if err := s.store.deleteRange(lo, hi); err != nil {
		return fmt.Errorf("shard %d: restore: %w", s.id, err)
	}
	keys, size, err := s.load(sr, next)
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
	s.stats.streamRestores.Add(1)
	lo, hi = genBounds(s.id, old)
	if err := s.store.deleteRange(lo, hi); err != nil {
		return fmt.Errorf("shard %d: restore: drop old records: %w", s.id, err)
	}
	return nil
}

// load verifies the rest of the stream, after its header, while writing
// its entries into sstables for generation gen, ingests them, and returns
// the record count and logical size.
func (s *Shard) load(sr *snapReader, gen byte) (keys, size int64, err error) {
	iw := s.store.newIngester(s.id, gen)
	defer iw.abort()
	c := newIndexCheck()
	key := make([]byte, auditKeyLen)
	putPrefix(key, s.id, gen, 0)
	var prev []byte
	value := make([]byte, 0, valueHeaderLen+digest.MaxResultLen)
	for n := 0; ; n++ {
		var kind [1]byte
		if sr.Raw(kind[:]); sr.Err != nil || kind[0] == 0 {
			break
		}
		rest := entryLen(kind[0])
		if rest < 0 {
			return 0, 0, fmt.Errorf("%w: entry %d: kind %#x", ErrCorruptSnapshot, n, kind[0])
		}
		key = key[:prefixLen+rest]
		key[prefixLen-1] = kind[0]
		sr.Raw(key[prefixLen:])
		value = value[:0]
		if kind[0] == kindRecord {
			value = sr.value(value)
		}
		if sr.Err != nil {
			break
		}
		if prev != nil && bytes.Compare(key[prefixLen-1:], prev) <= 0 {
			return 0, 0, fmt.Errorf("%w: entry %d: keys out of order", ErrCorruptSnapshot, n)
		}
		prev = append(prev[:0], key[prefixLen-1:]...)
		if err := c.add(kind[0], key[prefixLen:], value); err != nil {
			return 0, 0, fmt.Errorf("%w: entry %d: %w", ErrCorruptSnapshot, n, err)
		}
		if kind[0] == kindRecord {
			size += recordBytes(len(value))
		}
		if err := iw.add(key, value); err != nil {
			return 0, 0, err
		}
	}
	count := sr.U64()
	if err := sr.Verify(); err != nil {
		return 0, 0, err
	}
	if err := c.check(count); err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
	}
	if err := iw.finish(); err != nil {
		return 0, 0, err
	}
	return int64(count), size, nil
}

// indexCheck verifies that the index entries of a stream are exactly those
// its records imply, without holding them: it compares the sums of a
// keyed hash over the entries received and over the entries derived from
// the records. The seed is random, so no input can be crafted to collide;
// accidental damage is caught by the CRC first anyway.
type indexCheck struct {
	seed                   maphash.Seed
	records, audit, expiry uint64
	got, derived           uint64
	buf                    [1 + auditKeyLen]byte
}

func newIndexCheck() *indexCheck { return &indexCheck{seed: maphash.MakeSeed()} }

func (c *indexCheck) sum(kind byte, rest []byte) uint64 {
	c.buf[0] = kind
	n := copy(c.buf[1:], rest)
	return maphash.Bytes(c.seed, c.buf[:1+n])
}

func (c *indexCheck) add(kind byte, rest, value []byte) error {
	switch kind {
	case kindAudit:
		c.audit++
		c.got += c.sum(kind, rest)
	case kindExpiry:
		c.expiry++
		c.got += c.sum(kind, rest)
	case kindRecord:
		c.records++
		r, err := decodeValue(value[:valueHeaderLen])
		if err != nil {
			return err
		}
		if st := r.State(); st < keyspace.Processing || st > keyspace.Poisoned {
			return fmt.Errorf("record has state %d", st)
		}
		d := getDigest(rest)
		var xk [expiryKeyLen]byte
		var ak [auditKeyLen]byte
		c.derived += c.sum(kindExpiry, expiryKey(&xk, 0, 0, r.Deadline, d)[prefixLen:])
		c.derived += c.sum(kindAudit, auditKey(&ak, 0, 0, d.NamespaceTag(), r.CompletedAt(), d)[prefixLen:])
	}
	return nil
}

func (c *indexCheck) check(count uint64) error {
	if c.records != count {
		return fmt.Errorf("%d records, trailer says %d", c.records, count)
	}
	if c.audit != count || c.expiry != count || c.got != c.derived {
		return fmt.Errorf("index entries (%d audit, %d purge) do not match the %d records", c.audit, c.expiry, count)
	}
	return nil
}

// snapReader reads the cold snapshot stream (see snapshot.go).
type snapReader struct{ *snapio.Reader }

// value reads a length-prefixed record value into buf.
func (sr *snapReader) value(buf []byte) []byte {
	n := sr.U32()
	if sr.Err != nil {
		return buf
	}
	if n < valueHeaderLen || n > valueHeaderLen+digest.MaxResultLen {
		sr.Fail(fmt.Errorf("%w: value of %d bytes", ErrCorruptSnapshot, n))
		return buf
	}
	buf = buf[:n]
	sr.Raw(buf)
	return buf
}
