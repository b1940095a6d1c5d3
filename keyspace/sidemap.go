package keyspace

import (
	"iter"

	"github.com/l4xg/grid/digest"
)

// sideMap is a map keyed by digest, cut into sideParts parts that a snapshot
// shares copy-on-write: taking a snapshot marks every part shared in O(parts),
// and the first write to a shared part afterwards copies that part alone
// (1/sideParts of the map), so neither the snapshot nor the writes that follow
// it hold the apply loop for a copy of the whole map.
//
// A part's map is never mutated once shared, so a snapshot may read it
// without locks while the machine keeps writing its own copies. Parts are
// allocated on first write: an empty sideMap costs its array of nil pointers.
type sideMap[V any] struct {
	parts [sideParts]*sidePart[V]
	n     int
}

type sidePart[V any] struct {
	m      map[digest.Digest]V
	shared bool // held by a snapshot: copy before writing
}

const sideParts = 256

func sidePartOf(d digest.Digest) int { return int(d.Lo >> 56) }

func (s *sideMap[V]) get(d digest.Digest) (V, bool) {
	p := s.parts[sidePartOf(d)]
	if p == nil {
		var zero V
		return zero, false
	}
	v, ok := p.m[d]
	return v, ok
}

// writable returns the part of d, copying it first if a snapshot shares it.
func (s *sideMap[V]) writable(d digest.Digest) *sidePart[V] {
	i := sidePartOf(d)
	p := s.parts[i]
	switch {
	case p == nil:
		p = &sidePart[V]{m: make(map[digest.Digest]V)}
		s.parts[i] = p
	case p.shared:
		c := &sidePart[V]{m: make(map[digest.Digest]V, len(p.m)+1)}
		for k, v := range p.m {
			c.m[k] = v
		}
		p = c
		s.parts[i] = p
	}
	return p
}

func (s *sideMap[V]) set(d digest.Digest, v V) {
	p := s.writable(d)
	n := len(p.m)
	p.m[d] = v // one lookup: the length tells whether d was new
	s.n += len(p.m) - n
}

func (s *sideMap[V]) del(d digest.Digest) {
	if p := s.parts[sidePartOf(d)]; p == nil {
		return
	} else if _, ok := p.m[d]; !ok {
		return
	}
	delete(s.writable(d).m, d)
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
			for k, v := range p.m {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}
