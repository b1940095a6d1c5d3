package digest

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

func TestTokenBits(t *testing.T) {
	for _, c := range []struct {
		shards int
		bits   uint8
	}{{0, 0}, {1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {8, 3}, {9, 4}, {4096, 12}, {4097, 13}, {1 << 16, 16}} {
		if got := TokenBits(c.shards); got != c.bits {
			t.Errorf("TokenBits(%d) = %d, want %d", c.shards, got, c.bits)
		}
	}
	for _, c := range []struct{ id, shards int }{{0, 0}, {-1, 8}, {8, 8}, {0, 1<<16 + 1}} {
		if _, err := NewTokenLayout(c.id, c.shards); err == nil {
			t.Errorf("NewTokenLayout(%d, %d) accepted", c.id, c.shards)
		}
	}
	if err := (TokenLayout{Shard: 8, Bits: 3}).Validate(); err == nil {
		t.Error("shard 8 fits 3 bits?")
	}
	if err := (TokenLayout{Bits: MaxTokenBits + 1}).Validate(); err == nil {
		t.Errorf("%d bits accepted", MaxTokenBits+1)
	}
}

// TestTokenLayoutZeroIsTheOldLayout: a machine without a layout (a single
// shard, the tests as data) grants index<<16 | position, as before tokens
// named their shard.
func TestTokenLayoutZeroIsTheOldLayout(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		index := rapid.Uint64Range(0, 1<<48-1).Draw(t, "index")
		pos := rapid.IntRange(0, MaxTokenPosition).Draw(t, "pos")
		if got, want := (TokenLayout{}).Token(index, pos), index<<16|uint64(pos); got != want {
			t.Fatalf("Token(%d, %d) = %d, want %d", index, pos, got, want)
		}
	})
}

// tokenLayoutGen draws a layout of a grid of 1..65536 shards.
func tokenLayoutGen() *rapid.Generator[TokenLayout] {
	return rapid.Custom(func(t *rapid.T) TokenLayout {
		shards := rapid.IntRange(1, 1<<16).Draw(t, "shards")
		id := rapid.IntRange(0, shards-1).Draw(t, "shard")
		l, err := NewTokenLayout(id, shards)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

// TestTokenLayoutProperties: under any layout tokens strictly increase with
// (index, position), name their shard (TokenShard), differ between shards,
// fit 64 bits up to MaxIndex, and the first token under a layout is above
// every token of the zero layout at an earlier index (an upgrade).
func TestTokenLayoutProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		shards := rapid.IntRange(1, 1<<16).Draw(t, "shards")
		id := rapid.IntRange(0, shards-1).Draw(t, "shard")
		l, err := NewTokenLayout(id, shards)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		limit := l.MaxIndex()
		i1 := rapid.Uint64Range(0, limit).Draw(t, "index-1")
		i2 := rapid.Uint64Range(i1, limit).Draw(t, "index-2")
		p1 := rapid.IntRange(0, MaxTokenPosition).Draw(t, "pos-1")
		p2 := rapid.IntRange(0, MaxTokenPosition).Draw(t, "pos-2")
		if i1 == i2 && p2 <= p1 {
			p1, p2 = p2, p1
			if p1 == p2 && p2 < MaxTokenPosition {
				p2++
			} else if p1 == p2 {
				p1--
			}
		}
		a, b := l.Token(i1, p1), l.Token(i2, p2)
		if a >= b {
			t.Fatalf("(%d, %d) -> %d is not below (%d, %d) -> %d", i1, p1, a, i2, p2, b)
		}
		for _, tok := range []uint64{a, b} {
			if s, ok := TokenShard(tok, shards); !ok || s != id {
				t.Fatalf("TokenShard(%d, %d) = %d, %v; want %d", tok, shards, s, ok, id)
			}
		}
		if got := l.Token(i2, p2) >> l.Bits >> 16; got != i2 {
			t.Fatalf("index %d does not survive in its token %d (read back %d)", i2, b, got)
		}
		other := rapid.IntRange(0, shards-1).Filter(func(s int) bool { return s != id || shards == 1 }).Draw(t, "other")
		if o, _ := NewTokenLayout(other, shards); other != id && o.Token(i1, p1) == a {
			t.Fatalf("shards %d and %d both grant %d at (%d, %d)", id, other, a, i1, p1)
		}
		// An upgrade: every zero-layout token of an index below i' is
		// below the new layout's tokens at i'.
		if i2 > 0 && i2 <= 1<<48-1 {
			old := TokenLayout{}.Token(i2-1, MaxTokenPosition)
			if nw := l.Token(i2, 0); nw <= old {
				t.Fatalf("upgrade to %+v: token %d at index %d is not above %d at index %d", l, nw, i2, old, i2-1)
			}
		}
	})
}

func TestTokenLayoutLimits(t *testing.T) {
	for _, bits := range []uint8{0, 3, 12, 16} {
		l := TokenLayout{Bits: bits, Shard: 1<<bits - 1}
		top := l.Token(l.MaxIndex(), MaxTokenPosition)
		if top>>bits>>16 != l.MaxIndex() || top < l.Token(l.MaxIndex()-1, 0) {
			t.Errorf("bits %d: the token at MaxIndex %d overflows: %d", bits, l.MaxIndex(), top)
		}
		if want := uint64(1)<<(48-bits) - 1; l.MaxIndex() != want {
			t.Errorf("bits %d: MaxIndex %d, want 2^%d-1", bits, l.MaxIndex(), 48-bits)
		}
		if l.Token(1<<(47-bits)-1, MaxTokenPosition) > math.MaxInt64 {
			t.Errorf("bits %d: tokens below index 2^%d do not fit a signed 64-bit column", bits, 47-bits)
		}
	}
	// A token whose shard bits name no shard of the grid.
	if _, ok := TokenShard(6, 6); ok {
		t.Error("token 6 names shard 6 of 6")
	}
	if s, ok := TokenShard(1<<20|5, 6); !ok || s != 5 {
		t.Errorf("TokenShard = %d, %v", s, ok)
	}
}
