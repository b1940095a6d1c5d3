package keyspace

import (
	"maps"
	"testing"

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
