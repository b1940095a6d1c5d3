package digest

import (
	"fmt"
	"math/bits"
)

// TokenLayout is how a shard makes the fencing token of a grant
// (docs/design.md section 3) from the Raft index of the entry and the
// command's position in it, and how a token names the shard that granted it:
//
//	token = (index<<16 | position) << Bits | Shard
//
// Bits is TokenBits of the grid's shard count, a hard setting, and Shard the
// shard's id. The leader writes the layout into every entry it proposes
// (Entry.Layout), so the log itself says how each entry's tokens are made:
// every replica makes the same ones, also one replaying entries written
// before an upgrade, whatever snapshot it starts from. A token therefore
// tells which shard holds its lease, and a settle (Complete, Fail, Release,
// Extend) finds the key's record by its token alone, also when the key was
// placed by an entity the settle does not name (see Record).
//
// Properties, for a fixed layout:
//   - Strictly increasing per shard, hence per key (a key's shard never
//     changes): indexes grow across leader changes and restarts, positions
//     grow within an entry, and the shard bits are constant.
//   - Unique across the grid: two shards differ in the low bits.
//   - The zero layout (Bits 0, Shard 0) is index<<16 | position: the tokens
//     of an entry without a layout (a grid before tokens named their
//     shard), and of a single shard.
//   - Moving from entries without a layout to entries with one (an upgrade)
//     keeps tokens increasing per shard: a later index i' > i gives
//     (i'<<16)<<b >= i'<<16 > i<<16 | position.
//   - The index room shrinks by Bits: tokens fit 64 bits up to index
//     MaxIndex = 2^(48-Bits) - 1, and stay below 2^63 (a signed 64-bit
//     column) up to 2^(47-Bits). At 2,000 entries a second on one shard
//     that is 2^44 entries, 280 years, for 8 shards (Bits 3); 2^35, about 6
//     months, for 4096 shards (Bits 12).
//
// A token's shard is only meaningful for tokens made under the layout: a
// token granted before the upgrade names an arbitrary shard (the API then
// finds the key's record on its own shard, see api/route.go).
type TokenLayout struct {
	Shard uint32
	Bits  uint8
}

const (
	// tokenPosBits is the width of the position field.
	tokenPosBits = 16
	// MaxTokenPosition is the highest position a token can carry;
	// keyspace.MaxEntryCommands keeps an entry's commands within it.
	MaxTokenPosition = 1<<tokenPosBits - 1
	// MaxTokenBits is the widest shard field: topology.MaxShards (1<<16)
	// shards.
	MaxTokenBits = 16
)

// TokenBits is the width of the shard field for a grid of shards shards:
// the bits that number shards 0..shards-1 (0 for a single shard).
func TokenBits(shards int) uint8 {
	if shards <= 1 {
		return 0
	}
	return uint8(bits.Len(uint(shards - 1)))
}

// NewTokenLayout is the layout of shard id in a grid of shards shards. It
// refuses an id outside 0..shards-1 and more shards than a token can name.
func NewTokenLayout(id, shards int) (TokenLayout, error) {
	if shards < 1 || shards > 1<<MaxTokenBits || id < 0 || id >= shards {
		return TokenLayout{}, fmt.Errorf("keyspace: token layout of shard %d of %d: want 0 <= shard < shards <= %d", id, shards, 1<<MaxTokenBits)
	}
	return TokenLayout{Shard: uint32(id), Bits: TokenBits(shards)}, nil
}

// Validate checks that Shard fits in Bits and Bits in MaxTokenBits.
func (l TokenLayout) Validate() error {
	if l.Bits > MaxTokenBits || uint64(l.Shard) >= 1<<l.Bits {
		return fmt.Errorf("keyspace: token layout: shard %d does not fit %d bits (at most %d)", l.Shard, l.Bits, MaxTokenBits)
	}
	return nil
}

// Token is the fencing token of the command at position pos of the entry at
// Raft index index.
func (l TokenLayout) Token(index uint64, pos int) uint64 {
	return (index<<tokenPosBits|uint64(pos))<<l.Bits | uint64(l.Shard)
}

// MaxIndex is the largest Raft index whose tokens fit 64 bits.
func (l TokenLayout) MaxIndex() uint64 {
	return 1<<(64-tokenPosBits-l.Bits) - 1
}

// TokenShard is the shard that granted token in a grid of shards shards
// (TokenLayout), and false when the token names no shard of it: it was not
// granted by this grid under its current layout.
func TokenShard(token uint64, shards int) (int, bool) {
	b := TokenBits(shards)
	s := int(token & (1<<b - 1))
	return s, s < shards
}
