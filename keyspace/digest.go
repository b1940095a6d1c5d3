package keyspace

import (
	"fmt"

	farm "github.com/dgryski/go-farm"
)

// Digest is the 128-bit FarmHash fingerprint of a (namespace, key) pair, the
// only form in which the grid stores a key. Its bits are uniformly
// distributed; the hot table and the slot map take different bits of it, so
// the shard a digest lives on does not bias its place inside the shard.
type Digest struct{ Hi, Lo uint64 }

// Separator bytes between the namespace and the hashed name. Keys and entity
// ids of one namespace hash into disjoint spaces.
const (
	sepKey    = 0x00
	sepEntity = 0x01
)

// KeyDigest returns Fingerprint128(namespace ‖ 0x00 ‖ key) with bits 32-47
// of Hi replaced by the namespace tag (see NamespaceTag), leaving 112 hashed
// bits. The function, seed and layout are part of the on-disk format: never
// change them for a live cluster.
func KeyDigest(namespace string, key []byte) Digest {
	return fingerprint(namespace, sepKey, key)
}

// EntityDigest returns the digest under which the committed version of an
// entity is kept: Fingerprint128(namespace ‖ 0x01 ‖ entity), tagged like
// KeyDigest.
func EntityDigest(namespace string, entity []byte) Digest {
	return fingerprint(namespace, sepEntity, entity)
}

// RecordDigest is the digest of a key's record. Without an entity it is the
// key digest. With one, the low 32 bits of Hi (the slot bits, see Slot) are
// taken from the entity digest, so every key of an entity lands on the
// entity's shard and the version check of Reserve and the version raise of
// Complete are atomic with the key's own record. Every operation on such a key
// must therefore name the same entity.
func RecordDigest(namespace string, key, entity []byte) Digest {
	d := KeyDigest(namespace, key)
	if len(entity) == 0 {
		return d
	}
	e := EntityDigest(namespace, entity)
	d.Hi = d.Hi&^slotMask | e.Hi&slotMask
	return d
}

const (
	slotMask = 1<<32 - 1
	// Bits of Hi: 0-31 slot, 32-47 namespace tag, 56-63 hot table segment.
	tagShift = 32
	tagMask  = 0xffff << tagShift
)

// NamespaceTag returns the 16-bit tag that digests made in namespace carry.
func NamespaceTag(namespace string) uint16 {
	return uint16(farm.Fingerprint32([]byte(namespace)))
}

func fingerprint(namespace string, sep byte, name []byte) Digest {
	var stack [256]byte
	buf := stack[:0]
	if n := len(namespace) + 1 + len(name); n > len(stack) {
		buf = make([]byte, 0, n)
	}
	buf = append(buf, namespace...)
	buf = append(buf, sep)
	buf = append(buf, name...)
	lo, hi := farm.Fingerprint128(buf)
	hi = hi&^tagMask | uint64(NamespaceTag(namespace))<<tagShift
	return Digest{Hi: hi, Lo: lo}
}

// RequestIDHash is the form in which a Reserve's request id enters the log
// and the record: its 64-bit FarmHash Fingerprint64. The API computes it once,
// when it builds the command; the state machine only compares hashes. Two
// request ids that share a hash would be taken for one only if they reserve
// the same key while one of them holds it, a chance of 2^-64 per pair. Like
// the digest, the function is part of the log format.
func RequestIDHash(id []byte) uint64 { return farm.Fingerprint64(id) }

// Slot maps the digest onto one of slots slots, from the low 32 bits of Hi
// (fast range reduction, no modulo bias worth the name).
func (d Digest) Slot(slots uint32) uint32 {
	return uint32((d.Hi & slotMask) * uint64(slots) >> 32)
}

// String renders the digest as 32 hex digits, Hi first.
func (d Digest) String() string { return fmt.Sprintf("%016x%016x", d.Hi, d.Lo) }
