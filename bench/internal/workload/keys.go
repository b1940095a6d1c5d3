package workload

import (
	"fmt"
	"math/rand/v2"
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
	if g.shape == ShapeComposite {
		return fmt.Sprintf("%stenant-%04d:invoice:2026:%010d", g.prefix, g.worker, g.seq)
	}
	// UUID v4 with the worker and sequence in its last group, so uniqueness
	// does not rest on the random bits.
	hi, lo := g.rng.Uint64(), g.rng.Uint32()
	return fmt.Sprintf("%s%08x-%04x-4%03x-%04x-%04x%08x", g.prefix,
		uint32(hi>>32), uint16(hi>>16), uint16(hi)&0x0fff, 0x8000|uint16(lo)&0x3fff,
		uint16(g.worker), uint32(g.seq))
}
