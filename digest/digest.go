package digest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"

	farm "github.com/dgryski/go-farm"
)

// Digest is the 128-bit FarmHash fingerprint of a (namespace, key) pair, the
// only form in which the grid stores a key. Its bits are uniformly
// distributed; the hot table and the slot map take different bits of it, so
// the shard a digest lives on does not bias its place inside the shard.
//
// Bits of Hi: 0-31 the slot bits (SlotMask), 32-47 the namespace tag, 56-63
// the hot table's segment.
type Digest struct{ Hi, Lo uint64 }

const (
	// Size is the length of a digest's byte form (Append, Decode): Hi then
	// Lo, big-endian, the order of its hex form (String, Parse).
	Size = 16

	// SlotMask selects the slot bits of Hi, the bits Slot reads and Record
	// takes from an entity.
	SlotMask = 1<<32 - 1

	tagShift = 32
	tagMask  = 0xffff << tagShift
)

// Separator bytes between the namespace and the hashed name. Keys and entity
// ids of one namespace hash into disjoint spaces.
const (
	sepKey    = 0x00
	sepEntity = 0x01
)

// Key returns Fingerprint128(namespace ‖ 0x00 ‖ key) with bits 32-47 of Hi
// replaced by the namespace tag (see NamespaceTag), leaving 112 hashed bits.
// The function, seed and layout are part of the on-disk format: never change
// them for a live cluster.
func Key(namespace string, key []byte) Digest {
	return fingerprint(namespace, sepKey, key)
}

// Entity returns the digest under which the committed version of an entity
// is kept: Fingerprint128(namespace ‖ 0x01 ‖ entity), tagged like Key.
func Entity(namespace string, entity []byte) Digest {
	return fingerprint(namespace, sepEntity, entity)
}

// Record is the digest of a key's record. Without an entity it is the key
// digest. With one, the slot bits of Hi (SlotMask) are taken from the entity
// digest, so every key of an entity lands on the entity's shard and the
// version check of Reserve and the version raise of Complete are atomic with
// the key's own record. Every operation on such a key must therefore name the
// same entity.
func Record(namespace string, key, entity []byte) Digest {
	d := Key(namespace, key)
	if len(entity) == 0 {
		return d
	}
	e := Entity(namespace, entity)
	d.Hi = d.Hi&^SlotMask | e.Hi&SlotMask
	return d
}

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

// NamespaceTag is the 16-bit tag of the namespace a digest was made in. It
// lets the cold tier index records by namespace for audits; distinct
// namespaces may share a tag, so an audit by tag can list a few records of
// another namespace, never miss one of its own.
func (d Digest) NamespaceTag() uint16 { return uint16(d.Hi >> tagShift) }

// Slot maps the digest onto one of slots slots, from its slot bits (fast
// range reduction, no modulo bias worth the name).
func (d Digest) Slot(slots uint32) uint32 {
	return uint32((d.Hi & SlotMask) * uint64(slots) >> 32)
}

// SlotShard maps a slot of slots slots to its shard of shards shards:
// contiguous slot ranges per shard. Node, cluster map and client all place
// a digest by it.
func SlotShard(slot, slots uint32, shards int) int {
	return int(uint64(slot) * uint64(shards) / uint64(slots))
}

// Shard is the shard of shards shards that holds the digest's record when
// the digest space is cut into slots slots: SlotShard of its Slot.
func (d Digest) Shard(slots uint32, shards int) int {
	return SlotShard(d.Slot(slots), slots, shards)
}

// Append appends the digest's byte form (Size bytes) to b.
func (d Digest) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, d.Hi)
	return binary.BigEndian.AppendUint64(b, d.Lo)
}

// Put writes the digest's byte form into b[:Size]; b must be that long.
func (d Digest) Put(b []byte) {
	binary.BigEndian.PutUint64(b[:8], d.Hi)
	binary.BigEndian.PutUint64(b[8:Size], d.Lo)
}

// Bytes is the digest's byte form in a slice of its own.
func (d Digest) Bytes() []byte { return d.Append(make([]byte, 0, Size)) }

// Decode reads a digest's byte form. ok is false unless b is Size bytes.
func Decode(b []byte) (d Digest, ok bool) {
	if len(b) != Size {
		return Digest{}, false
	}
	return Digest{Hi: binary.BigEndian.Uint64(b), Lo: binary.BigEndian.Uint64(b[8:])}, true
}

// String renders the digest as 32 hex digits, Hi first.
func (d Digest) String() string { return fmt.Sprintf("%016x%016x", d.Hi, d.Lo) }

// Parse reads the form String writes: 32 hex digits.
func Parse(s string) (Digest, error) {
	b, err := hex.DecodeString(s)
	d, ok := Decode(b)
	if err != nil || !ok {
		return Digest{}, fmt.Errorf("%q is not 32 hex digits", s)
	}
	return d, nil
}
