package keyspace

import (
	"iter"
	"math/bits"
	"math/rand/v2"
	"slices"

	"github.com/l4xg/grid/digest"
)

// sideMap is a map keyed by digest, cut into sideParts parts that a snapshot
// shares copy-on-write: taking a snapshot marks every part shared in O(parts),
// and the first write to a shared part afterwards copies that part alone
// (1/sideParts of the map), so neither the snapshot nor the writes that follow
// it hold the apply loop for a copy of the whole map.
//
// A part is never mutated once shared, so a snapshot may read it without
// locks while the machine keeps writing its own copies. Parts are allocated
// on first write: an empty sideMap costs its array of nil pointers.
//
// A part is an open-addressing table: linear probing over a power-of-two
// array of {digest, value} slots, at most 3/4 full, halved below 1/8, with
// deletion by backward shift. Deletes leave no tombstones, so a map that sees
// a steady stream of inserts and deletes (a request id per reserve, dropped
// at its settle) keeps its probe sequences short; Go's maps, which this
// replaced, leave tombstones in full groups, and probing through them was
// most of the request ids' cost (bench/README.md, "Where the batch's CPU goes,
// 3 nodes"). The all-zero digest marks an empty slot, so it is kept beside
// the array.
//
// Slots are placed by a hash of the digest under a random seed of the part,
// so keys ground to collide in the digest's bits do not build long probe
// chains. The placement is no replicated state: replicas hold the same
// entries, snapshots write them in no defined order and checksums look them
// up by digest.
type sideMap[V any] struct {
	parts [sideParts]*sidePart[V]
	n     int
}

type sidePart[V any] struct {
	slots   []sideSlot[V] // power-of-two length, or nil; a zero digest marks an empty slot
	n       int           // entries in slots
	seed    [2]uint64
	hasZero bool
	zero    V    // the all-zero digest's value, when hasZero
	shared  bool // held by a snapshot: copy before writing
}

type sideSlot[V any] struct {
	d digest.Digest
	v V
}

const (
	sideParts    = 256
	sideMinSlots = 8
	notFound     = -1 // find's answers beside a slot's index
	zeroSlot     = -2 // the all-zero digest, held beside the slots
)

func sidePartOf(d digest.Digest) int { return int(d.Lo >> 56) }

func (s *sideMap[V]) get(d digest.Digest) (V, bool) {
	if p := s.parts[sidePartOf(d)]; p != nil {
		switch i := p.find(d); {
		case i == zeroSlot:
			return p.zero, true
		case i != notFound:
			return p.slots[i].v, true
		}
	}
	var zero V
	return zero, false
}

// touch reads d's home slot (for Machine.prefetch) and returns a word of it.
func (s *sideMap[V]) touch(d digest.Digest) uint64 {
	p := s.parts[sidePartOf(d)]
	if p == nil || len(p.slots) == 0 {
		return 0
	}
	return p.slots[p.home(d)].d.Lo
}

// writable returns the part of d, copying it first if a snapshot shares it.
func (s *sideMap[V]) writable(d digest.Digest) *sidePart[V] {
	i := sidePartOf(d)
	p := s.parts[i]
	switch {
	case p == nil:
		p = &sidePart[V]{seed: [2]uint64{rand.Uint64(), rand.Uint64()}}
		s.parts[i] = p
	case p.shared:
		c := *p
		c.slots, c.shared = slices.Clone(p.slots), false
		p = &c
		s.parts[i] = p
	}
	return p
}

func (s *sideMap[V]) set(d digest.Digest, v V) {
	if s.writable(d).set(d, v) {
		s.n++
	}
}

func (s *sideMap[V]) del(d digest.Digest) {
	p := s.parts[sidePartOf(d)]
	if p == nil {
		return
	}
	i := p.find(d)
	if i == notFound {
		return // no copy of a shared part for nothing
	}
	if p.shared {
		p = s.writable(d)
	}
	p.delAt(i)
	s.n--
}

func (s *sideMap[V]) len() int { return s.n }

// share returns a read-only copy for a snapshot and marks every part shared.
func (s *sideMap[V]) share() sideMap[V] {
	for _, p := range s.parts {
		if p != nil {
			p.shared = true
		}
	}
	return *s
}

// all yields every entry, part by part (in no defined order within a part).
func (s *sideMap[V]) all() iter.Seq2[digest.Digest, V] {
	return func(yield func(digest.Digest, V) bool) {
		for _, p := range s.parts {
			if p == nil {
				continue
			}
			if p.hasZero && !yield(digest.Digest{}, p.zero) {
				return
			}
			for _, sl := range p.slots {
				if sl.d != (digest.Digest{}) && !yield(sl.d, sl.v) {
					return
				}
			}
		}
	}
}

// home is the slot where d's probe sequence starts.
func (p *sidePart[V]) home(d digest.Digest) int {
	hi, lo := bits.Mul64(d.Lo^p.seed[0], d.Hi^p.seed[1])
	return int((hi ^ lo) & uint64(len(p.slots)-1))
}

// set stores v under d and reports whether d is new to the part.
func (p *sidePart[V]) set(d digest.Digest, v V) bool {
	if d == (digest.Digest{}) {
		added := !p.hasZero
		p.hasZero, p.zero = true, v
		return added
	}
	if (p.n+1)*4 > len(p.slots)*3 {
		p.resize(max(sideMinSlots, 2*len(p.slots)))
	}
	mask := len(p.slots) - 1
	for i := p.home(d); ; i = (i + 1) & mask {
		switch sl := &p.slots[i]; sl.d {
		case d:
			sl.v = v
			return false
		case digest.Digest{}:
			*sl = sideSlot[V]{d, v}
			p.n++
			return true
		}
	}
}

// find returns the index of the slot holding d, notFound, or zeroSlot for
// the all-zero digest when the part holds it.
func (p *sidePart[V]) find(d digest.Digest) int {
	if d == (digest.Digest{}) {
		if p.hasZero {
			return zeroSlot
		}
		return notFound
	}
	if len(p.slots) == 0 {
		return notFound
	}
	mask := len(p.slots) - 1
	for i := p.home(d); ; i = (i + 1) & mask {
		switch p.slots[i].d {
		case d:
			return i
		case digest.Digest{}:
			return notFound
		}
	}
}

// delAt empties slot i (from find). The entries after the hole move back
// into it when their probe sequence passes it, so every entry stays
// reachable from its home without tombstones.
func (p *sidePart[V]) delAt(i int) {
	if i == zeroSlot {
		var zero V
		p.hasZero, p.zero = false, zero
		return
	}
	mask := len(p.slots) - 1
	for j := (i + 1) & mask; p.slots[j].d != (digest.Digest{}); j = (j + 1) & mask {
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if h := p.home(p.slots[j].d); (j-h)&mask >= (j-i)&mask {
			p.slots[i] = p.slots[j]
			i = j
		}
	}
	p.slots[i] = sideSlot[V]{}
	p.n--
	if len(p.slots) > sideMinSlots && p.n*8 < len(p.slots) {
		p.resize(len(p.slots) / 2)
	}
}

// resize moves the part's entries into a fresh array of size slots.
func (p *sidePart[V]) resize(size int) {
	old := p.slots
	p.slots, p.n = make([]sideSlot[V], size), 0
	for _, sl := range old {
		if sl.d != (digest.Digest{}) {
			p.set(sl.d, sl.v)
		}
	}
}
