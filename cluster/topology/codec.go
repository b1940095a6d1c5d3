package topology

import (
	"encoding/binary"
	"fmt"
)

// Encodings in this package are canonical: one value has exactly one
// encoding, so a decoder refuses non-minimal varints and trailing bytes, and
// encode(decode(b)) == b for every b that decodes. That lets tests compare
// bytes and lets replicas compare maps by their encodings.

// maxString bounds every encoded string (node ids, addresses).
const maxString = 255

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// reader decodes a canonical encoding; the first error sticks and later
// reads return zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// uvarint reads a minimally encoded uvarint no larger than max.
func (r *reader) uvarint(max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	if n != len(binary.AppendUvarint(nil, v)) {
		r.fail("non-minimal varint")
		return 0
	}
	if v > max {
		r.fail("value %d above limit %d", v, max)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uint64() uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.fail("truncated")
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint(maxString)
	if r.err != nil {
		return ""
	}
	if uint64(len(r.b)) < n {
		r.fail("truncated string")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// done fails on trailing bytes and returns the sticky error.
func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}
