package workload

import (
	"math/rand/v2"
	"strconv"
)

// Key shapes.
const (
	ShapeUUID      = "uuid"      // a producer-made message id: a random UUID v4, 36 bytes
	ShapeComposite = "composite" // a business key: tenant, document type, year and number
)

// keyGen makes unique keys for one worker. Keys of different workers never
// collide: each carries its worker number.
type keyGen struct {
	prefix string
	shape  string
	worker int
	seq    uint64
	rng    *rand.Rand
}

func newKeyGen(prefix, shape string, worker int, seed uint64) *keyGen {
	return &keyGen{prefix: prefix, shape: shape, worker: worker, rng: rand.New(rand.NewPCG(seed, uint64(worker)))}
}

func (g *keyGen) next() string {
	g.seq++
	// Appended by hand, not with fmt: the benchmark's own work counts in
	// the client's CPU per operation, and Sprintf was a tenth of it.
	b := make([]byte, 0, len(g.prefix)+40)
	b = append(b, g.prefix...)
	if g.shape == ShapeComposite {
		b = append(b, "tenant-"...)
		b = appendPadded(b, uint64(g.worker), 4)
		b = append(b, ":invoice:2026:"...)
		return string(appendPadded(b, g.seq, 10))
	}
	// UUID v4 with the worker and sequence in its last group, so uniqueness
	// does not rest on the random bits.
	hi, lo := g.rng.Uint64(), g.rng.Uint32()
	b = appendHex(b, hi>>32, 8)
	b = append(b, '-')
	b = appendHex(b, (hi>>16)&0xffff, 4)
	b = append(b, '-', '4')
	b = appendHex(b, hi&0x0fff, 3)
	b = append(b, '-')
	b = appendHex(b, uint64(0x8000|uint16(lo)&0x3fff), 4)
	b = append(b, '-')
	b = appendHex(b, uint64(uint16(g.worker)), 4)
	return string(appendHex(b, uint64(uint32(g.seq)), 8))
}

// appendHex appends the low width hex digits of v, lower case.
func appendHex(b []byte, v uint64, width int) []byte {
	const digits = "0123456789abcdef"
	for i := width - 1; i >= 0; i-- {
		b = append(b, digits[(v>>(4*uint(i)))&0xf])
	}
	return b
}

// appendPadded appends v in decimal, zero-padded to at least width digits.
func appendPadded(b []byte, v uint64, width int) []byte {
	var buf [20]byte
	s := strconv.AppendUint(buf[:0], v, 10)
	for range width - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}
