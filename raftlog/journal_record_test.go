package raftlog

import (
	"bytes"
	"testing"
)

// nonZeroLen and allZero compare by blocks: a byte that is not zero is
// found wherever it lies relative to a block's edges.
func TestZeroScans(t *testing.T) {
	for _, size := range []int{0, 1, zeroBlock - 1, zeroBlock, zeroBlock + 1, 3*zeroBlock + 17} {
		b := make([]byte, size)
		if got := nonZeroLen(b); got != 0 || !allZero(b) {
			t.Fatalf("%d zeros: nonZeroLen = %d, allZero = %v", size, got, allZero(b))
		}
		for _, at := range []int{0, size / 2, zeroBlock - 1, zeroBlock, size - zeroBlock, size - 1} {
			if at < 0 || at >= size {
				continue
			}
			clear(b)
			b[at] = 1
			if got := nonZeroLen(b); got != at+1 {
				t.Fatalf("size %d, a one at %d: nonZeroLen = %d, want %d", size, at, got, at+1)
			}
			if allZero(b) {
				t.Fatalf("size %d, a one at %d: allZero", size, at)
			}
		}
	}
}

// allZero finds a byte that is not zero at every place in short slices,
// and in one whose bytes are all the same but not zero.
func TestAllZeroEveryByte(t *testing.T) {
	for size := range 80 {
		b := make([]byte, size)
		if !allZero(b) {
			t.Fatalf("%d zeros: allZero is false", size)
		}
		for at := range size {
			for _, v := range []byte{1, 0x80} {
				clear(b)
				b[at] = v
				if allZero(b) {
					t.Fatalf("size %d, %#x at %d: allZero", size, v, at)
				}
			}
		}
		if size > 0 && allZero(bytes.Repeat([]byte{7}, size)) {
			t.Fatalf("%d sevens: allZero", size)
		}
	}
}
