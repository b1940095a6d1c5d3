package keyspace

import (
	"maps"
	"testing"

	"pgregory.net/rapid"

	"github.com/l4xg/grid/digest"
)

// TestSideMapCopyOnWrite: a shared copy keeps the entries of the moment it
// was taken while the map is written, deleted from and shared again.
func TestSideMapCopyOnWrite(t *testing.T) {
	var s sideMap[int]
	want := make(map[digest.Digest]int)
	for i := range 2000 {
		d := digest.Key("t", []byte{byte(i), byte(i >> 8)})
		s.set(d, i)
		want[d] = i
	}
	snap := s.share()
	for d, v := range want {
		if v%3 == 0 {
			s.del(d)
		} else {
			s.set(d, -v)
		}
	}
	s.set(digest.Key("t", []byte("new")), 7)
	second := s.share()
	s.del(digest.Key("t", []byte("new")))

	if got := maps.Collect(snap.all()); !maps.Equal(got, want) || snap.len() != len(want) {
		t.Fatalf("first copy changed: %d entries (len %d), want %d", len(got), snap.len(), len(want))
	}
	if v, ok := second.get(digest.Key("t", []byte("new"))); !ok || v != 7 {
		t.Fatalf("second copy lost an entry: %d, %v", v, ok)
	}
	for d, v := range want {
		got, ok := s.get(d)
		switch {
		case v%3 == 0 && ok:
			t.Fatalf("deleted entry %v still there", d)
		case v%3 != 0 && (!ok || got != -v):
			t.Fatalf("entry %v = %d, %v; want %d", d, got, ok, -v)
		}
	}
	if s.len() != len(maps.Collect(s.all())) {
		t.Fatalf("len %d, entries %d", s.len(), len(maps.Collect(s.all())))
	}
}

// TestSideMapMatchesAMap: any sequence of sets, deletes and shares leaves a
// sideMap holding what a Go map holds, and every shared copy holding what the
// map held when it was taken. The digests come from a small pool with the
// all-zero digest and many in one part, so parts grow, shrink, probe past
// each other and shift entries back on delete.
func TestSideMapMatchesAMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pool := []digest.Digest{{}}
		for i := 1; i <= 300; i++ {
			pool = append(pool, digest.Digest{Hi: uint64(i) * 0x9e3779b97f4a7c15, Lo: uint64(i % 3)})
		}
		var s sideMap[uint64]
		want := map[digest.Digest]uint64{}
		type copyOf struct {
			m    sideMap[uint64]
			want map[digest.Digest]uint64
		}
		var copies []copyOf
		for op := range rapid.IntRange(1, 2000).Draw(t, "ops") {
			d := pool[rapid.IntRange(0, len(pool)-1).Draw(t, "digest")]
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3, 4:
				s.set(d, uint64(op+1))
				want[d] = uint64(op + 1)
			case 5, 6, 7, 8:
				s.del(d)
				delete(want, d)
			case 9:
				copies = append(copies, copyOf{s.share(), maps.Clone(want)})
			}
			if v, ok := s.get(d); v != want[d] || ok != (want[d] != 0) {
				t.Fatalf("after op %d: get(%v) = %d, %v; want %d", op, d, v, ok, want[d])
			}
		}
		for _, c := range append(copies, copyOf{s, want}) {
			if got := maps.Collect(c.m.all()); !maps.Equal(got, c.want) || c.m.len() != len(c.want) {
				t.Fatalf("%d entries (len %d), want %d", len(got), c.m.len(), len(c.want))
			}
			for _, d := range pool {
				if v, ok := c.m.get(d); v != c.want[d] || ok != (c.want[d] != 0) {
					t.Fatalf("get(%v) = %d, %v; want %d", d, v, ok, c.want[d])
				}
			}
		}
	})
}
