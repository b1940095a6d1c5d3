package snapio

import (
	"bytes"
	"errors"
	"testing"
)

var errBad = errors.New("test: corrupt")

func stream(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Raw([]byte("MAGIC"))
	w.U32(7)
	w.U64(1 << 40)
	n, err := w.Finish()
	if err != nil || n != int64(buf.Len()) || n != 5+4+8+4 {
		t.Fatalf("Finish = %d, %v; buffer holds %d", n, err, buf.Len())
	}
	return buf.Bytes()
}

// TestRoundTrip: what a Writer writes, a Reader reads back and verifies,
// consuming exactly the stream when it reads through a large bufio.Reader.
func TestRoundTrip(t *testing.T) {
	b := stream(t)
	r := NewReader(bytes.NewReader(b), 64, errBad)
	magic := make([]byte, 5)
	r.Raw(magic)
	if string(magic) != "MAGIC" || r.U32() != 7 || r.U64() != 1<<40 {
		t.Fatalf("read back wrong values (err %v)", r.Err)
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestCorruption: every truncation and every single-bit flip is an error
// wrapping the caller's sentinel.
func TestCorruption(t *testing.T) {
	good := stream(t)
	check := func(what string, b []byte) {
		t.Helper()
		r := NewReader(bytes.NewReader(b), 64, errBad)
		r.Raw(make([]byte, 5))
		r.U32()
		r.U64()
		if err := r.Verify(); !errors.Is(err, errBad) {
			t.Errorf("%s: Verify = %v, want an error wrapping errBad", what, err)
		}
	}
	for n := range len(good) {
		check("truncated", good[:n])
	}
	for i := range good {
		for bit := range 8 {
			b := bytes.Clone(good)
			b[i] ^= 1 << bit
			check("bit flipped", b)
		}
	}
}

// TestStickyErrors: after the first failure, reads return zeros and keep
// the first error; Fail does not replace it.
func TestStickyErrors(t *testing.T) {
	r := NewReader(bytes.NewReader([]byte{1, 2}), 64, errBad)
	if v := r.U64(); v != 0 || !errors.Is(r.Err, errBad) {
		t.Fatalf("short read: %d, %v", v, r.Err)
	}
	first := r.Err
	r.Fail(errors.New("later"))
	if r.Err != first || r.U32() != 0 {
		t.Fatalf("error replaced or reads continued: %v", r.Err)
	}
}
