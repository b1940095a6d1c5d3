package tiering

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

// Key layout (all integers big-endian):
//
//	shard(4) gen(1) 'r' digest(16)                          -> record value
//	shard(4) gen(1) 'x' deadline(8) digest(16)              -> empty (purge index)
//	shard(4) gen(1) 'a' nsTag(2) completedAt(8) digest(16)  -> empty (audit index)
//
// Times are stored sign-flipped (uint64(t) ^ 1<<63) so that every int64
// sorts in numeric order. gen is the shard's generation: Restore loads a
// snapshot into the other generation and switches only once it is complete,
// so a failed restore leaves the previous records untouched.
const (
	kindAudit  = 'a'
	kindRecord = 'r'
	kindExpiry = 'x'

	prefixLen    = 6
	recordKeyLen = prefixLen + digest.Size
	expiryKeyLen = prefixLen + 8 + digest.Size
	auditKeyLen  = prefixLen + 2 + 8 + digest.Size

	// valueHeaderLen is Token, Deadline, Meta and Fingerprint.
	valueHeaderLen = 32
)

func sortable(t int64) uint64 { return uint64(t) ^ 1<<63 }

func unsortable(u uint64) int64 { return int64(u ^ 1<<63) }

func putPrefix(b []byte, shard uint32, gen, kind byte) {
	binary.BigEndian.PutUint32(b, shard)
	b[4] = gen
	b[5] = kind
}

// getDigest reads the digest at the start of b, which holds at least
// digest.Size bytes.
func getDigest(b []byte) digest.Digest {
	d, _ := digest.Decode(b[:digest.Size])
	return d
}

func recordKey(k *[recordKeyLen]byte, shard uint32, gen byte, d digest.Digest) []byte {
	putPrefix(k[:], shard, gen, kindRecord)
	d.Put(k[prefixLen:])
	return k[:]
}

func expiryKey(k *[expiryKeyLen]byte, shard uint32, gen byte, deadline int64, d digest.Digest) []byte {
	putPrefix(k[:], shard, gen, kindExpiry)
	binary.BigEndian.PutUint64(k[prefixLen:], sortable(deadline))
	d.Put(k[prefixLen+8:])
	return k[:]
}

func auditKey(k *[auditKeyLen]byte, shard uint32, gen byte, tag uint16, completedAt int64, d digest.Digest) []byte {
	putPrefix(k[:], shard, gen, kindAudit)
	binary.BigEndian.PutUint16(k[prefixLen:], tag)
	binary.BigEndian.PutUint64(k[prefixLen+2:], sortable(completedAt))
	d.Put(k[prefixLen+10:])
	return k[:]
}

// kindBounds returns the key range [lo, hi) of one kind of one generation.
func kindBounds(shard uint32, gen, kind byte) (lo, hi []byte) {
	lo, hi = make([]byte, prefixLen), make([]byte, prefixLen)
	putPrefix(lo, shard, gen, kind)
	putPrefix(hi, shard, gen, kind+1)
	return lo, hi
}

// genBounds returns the key range [lo, hi) of one generation of a shard.
func genBounds(shard uint32, gen byte) (lo, hi []byte) {
	lo = binary.BigEndian.AppendUint32(nil, shard)
	lo = append(lo, gen)
	hi = prefixEnd(lo)
	return lo, hi
}

// shardBounds returns the key range [lo, hi) of every generation of a shard.
func shardBounds(shard uint32) (lo, hi []byte) {
	lo = binary.BigEndian.AppendUint32(nil, shard)
	if shard == math.MaxUint32 {
		// Generations are 0 and 1, so this bounds the last shard.
		return lo, append(append([]byte(nil), lo...), 0xff)
	}
	return lo, binary.BigEndian.AppendUint32(nil, shard+1)
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// which must not be all 0xff.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	panic("tiering: prefixEnd of an all-0xff prefix")
}

// encodeValue appends the stored form of r to dst.
func encodeValue(dst []byte, r *keyspace.ColdRecord) []byte {
	dst = binary.BigEndian.AppendUint64(dst, r.Token)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Deadline))
	dst = binary.BigEndian.AppendUint64(dst, r.Meta)
	dst = binary.BigEndian.AppendUint64(dst, r.Fingerprint)
	return append(dst, r.Result...)
}

// decodeValue decodes a stored value. The Result is copied, so the record
// does not alias v; it is nil when the record holds none.
func decodeValue(v []byte) (keyspace.ColdRecord, error) {
	var r keyspace.ColdRecord
	if len(v) < valueHeaderLen {
		return r, fmt.Errorf("%w: record value of %d bytes", ErrCorrupt, len(v))
	}
	r.Token = binary.BigEndian.Uint64(v)
	r.Deadline = int64(binary.BigEndian.Uint64(v[8:]))
	r.Meta = binary.BigEndian.Uint64(v[16:])
	r.Fingerprint = binary.BigEndian.Uint64(v[24:])
	if len(v) > valueHeaderLen {
		r.Result = append([]byte(nil), v[valueHeaderLen:]...)
	}
	return r, nil
}

// valueMeta returns the deadline and completed-at time of a stored value.
func valueMeta(v []byte) (deadline, completedAt int64, err error) {
	if len(v) < valueHeaderLen {
		return 0, 0, fmt.Errorf("%w: record value of %d bytes", ErrCorrupt, len(v))
	}
	deadline = int64(binary.BigEndian.Uint64(v[8:]))
	rec := keyspace.Record{Meta: binary.BigEndian.Uint64(v[16:])}
	return deadline, rec.CompletedAt(), nil
}

// maxTime is the largest stamp: nothing has a later deadline.
const maxTime = math.MaxInt64
