package keyspace

import (
	"cmp"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/l4xg/grid/digest"
	"pgregory.net/rapid"
)

// tdigest returns a pseudo-random digest derived from i (splitmix64).
func tabTestDigest(i uint64) digest.Digest {
	mix := func(z uint64) uint64 {
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return z ^ z>>31
	}
	x := i * 0x9e3779b97f4a7c15
	return digest.Digest{Hi: mix(x + 1), Lo: mix(x + 2)}
}

func tabTestRecord(i uint64) Record {
	return Record{Token: i, Deadline: int64(i) * 3, Meta: i | 1}
}

// tester is the part of testing.TB that *rapid.T also implements.
type tabTester interface {
	Helper()
	Fatalf(format string, args ...any)
}

type tabEntry struct {
	d digest.Digest
	r Record
}

func tabCollect(rng func(func(digest.Digest, Record) bool)) []tabEntry {
	var out []tabEntry
	rng(func(d digest.Digest, r Record) bool {
		out = append(out, tabEntry{d, r})
		return true
	})
	return out
}

// checkContents verifies that a Range function yields exactly model, each
// digest once.
func tabCheckContents(t tabTester, what string, rng func(func(digest.Digest, Record) bool), model map[digest.Digest]Record) {
	t.Helper()
	got := tabCollect(rng)
	seen := make(map[digest.Digest]bool, len(got))
	for _, e := range got {
		if seen[e.d] {
			t.Fatalf("%s: %v ranged twice", what, e.d)
		}
		seen[e.d] = true
		if r, ok := model[e.d]; !ok || r != e.r {
			t.Fatalf("%s: ranged %v=%v, model has %v (present %v)", what, e.d, e.r, r, ok)
		}
	}
	if len(got) != len(model) {
		t.Fatalf("%s: ranged %d records, model has %d", what, len(got), len(model))
	}
}

// checkTable verifies t against model and its internal invariants.
func tabCheck(tb tabTester, t *Table, model map[digest.Digest]Record) {
	tb.Helper()
	if t.Len() != len(model) {
		tb.Fatalf("Len = %d, model has %d", t.Len(), len(model))
	}
	for d, r := range model {
		if got, ok := t.Get(d); !ok || got != r {
			tb.Fatalf("Get(%v) = %v, %v; want %v", d, got, ok, r)
		}
	}
	tabCheckContents(tb, "Range", t.Range, model)
	tabCheckInvariants(tb, t)
}

func tabCheckInvariants(tb tabTester, t *Table) {
	tb.Helper()
	total := 0
	for si := range t.segs {
		s := &t.segs[si]
		n, count := len(s.slots), 0
		for p := range s.slots {
			e := s.slots[p]
			if e.r.Meta == 0 {
				continue
			}
			count++
			if tabSegOf(e.d) != si {
				tb.Fatalf("segment %d holds %v", si, e.d)
			}
			if q, ok := s.find(e.d); !ok || q != p {
				tb.Fatalf("segment %d: %v at %d, find says %d, %v", si, e.d, p, q, ok)
			}
		}
		if count != int(s.count) {
			tb.Fatalf("segment %d: count %d, %d occupied", si, s.count, count)
		}
		if n > 0 && (n != tabCap(si, s.level) || !tabFits(count, n)) {
			tb.Fatalf("segment %d: cap %d level %d count %d", si, n, s.level, count)
		}
		total += count
	}
	if total != t.n {
		tb.Fatalf("n = %d, segments hold %d", t.n, total)
	}
}

func TestTableBasic(t *testing.T) {
	tab := NewTable()
	d1, d2 := tabTestDigest(1), tabTestDigest(2)
	if _, ok := tab.Get(d1); ok {
		t.Fatal("Get on empty table hit")
	}
	if tab.Delete(d1) {
		t.Fatal("Delete on empty table reported true")
	}
	tab.Put(d1, tabTestRecord(10))
	tab.Put(d2, tabTestRecord(20))
	if r, ok := tab.Get(d1); !ok || r != tabTestRecord(10) {
		t.Fatalf("Get(d1) = %v, %v", r, ok)
	}
	tab.Put(d1, tabTestRecord(11))
	if r, _ := tab.Get(d1); r != tabTestRecord(11) || tab.Len() != 2 {
		t.Fatalf("overwrite: Get(d1) = %v, Len %d", r, tab.Len())
	}
	if !tab.Delete(d1) || tab.Delete(d1) {
		t.Fatal("Delete(d1) twice: want true, false")
	}
	if _, ok := tab.Get(d1); ok {
		t.Fatal("Get after Delete hit")
	}
	tab.Put(d1, tabTestRecord(12))
	tabCheck(t, tab, map[digest.Digest]Record{d1: tabTestRecord(12), d2: tabTestRecord(20)})
	calls := 0
	tab.Range(func(digest.Digest, Record) bool { calls++; return false })
	if calls != 1 {
		t.Fatalf("Range after false: %d calls", calls)
	}
}

func TestTablePutZeroMetaPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Put with Meta == 0 did not panic")
		}
	}()
	NewTable().Put(tabTestDigest(1), Record{Token: 1})
}

func TestTableZeroDigest(t *testing.T) {
	tab := NewTable()
	var z digest.Digest
	tab.Put(z, tabTestRecord(1))
	tab.Put(digest.Digest{Lo: 1}, tabTestRecord(2))
	tab.Put(digest.Digest{Hi: math.MaxUint64, Lo: math.MaxUint64}, tabTestRecord(3))
	if r, ok := tab.Get(z); !ok || r != tabTestRecord(1) {
		t.Fatalf("Get(zero) = %v, %v", r, ok)
	}
	if !tab.Delete(z) {
		t.Fatal("Delete(zero) = false")
	}
	tabCheck(t, tab, map[digest.Digest]Record{{Lo: 1}: tabTestRecord(2), {Hi: math.MaxUint64, Lo: math.MaxUint64}: tabTestRecord(3)})
}

func TestTableGrowthAndShrink(t *testing.T) {
	tab := NewTable()
	empty := tab.Bytes()
	if empty > 16<<10 {
		t.Fatalf("empty table holds %d bytes", empty)
	}
	model := map[digest.Digest]Record{}
	next := 100
	for i := range uint64(200_000) {
		d := tabTestDigest(i)
		tab.Put(d, tabTestRecord(i))
		model[d] = tabTestRecord(i)
		if int(i)+1 == next {
			tabCheck(t, tab, model)
			next *= 3
		}
	}
	tabCheck(t, tab, model)
	full := tab.Bytes()
	for i := range uint64(195_000) {
		if !tab.Delete(tabTestDigest(i)) {
			t.Fatalf("Delete(%d) = false", i)
		}
		delete(model, tabTestDigest(i))
	}
	tabCheck(t, tab, model)
	if b := tab.Bytes(); b > full/10 {
		t.Fatalf("after deleting 97.5%%: %d bytes, was %d", b, full)
	}
}

// TestTableHomeCollisions uses digests of one segment whose Lo values share
// home slot 0 (small Lo) or the last slot (Lo near the top, so runs wrap).
func TestTableHomeCollisions(t *testing.T) {
	var ds []digest.Digest
	for i := range uint64(40) {
		ds = append(ds, digest.Digest{Hi: i % 3, Lo: i / 3}, digest.Digest{Hi: 7 + i%2, Lo: math.MaxUint64 - i/2})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		tab, model := NewTable(), map[digest.Digest]Record{}
		for i := range 400 {
			d := ds[rng.IntN(len(ds))]
			if rng.IntN(3) == 0 {
				if _, ok := model[d]; tab.Delete(d) != ok {
					t.Fatalf("round %d op %d: Delete(%v) != %v", round, i, d, ok)
				}
				delete(model, d)
			} else {
				tab.Put(d, tabTestRecord(uint64(i)))
				model[d] = tabTestRecord(uint64(i))
			}
			tabCheckInvariants(t, tab)
		}
		tabCheck(t, tab, model)
	}
}

// TestTableHistoryIndependent: the same key set inserted in different orders
// yields the same layout.
func TestTableHistoryIndependent(t *testing.T) {
	keys := make([]uint64, 30_000)
	for i := range keys {
		keys[i] = uint64(i)
	}
	a, b := NewTable(), NewTable()
	for _, k := range keys {
		a.Put(tabTestDigest(k), tabTestRecord(k))
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for _, k := range keys {
		b.Put(tabTestDigest(k), tabTestRecord(k))
	}
	if !slices.Equal(tabCollect(a.Range), tabCollect(b.Range)) {
		t.Fatal("same key set, different Range order")
	}
}

// TestTableDeterminism feeds two tables the same operations (snapshots only on
// one of them) and expects the same order and size.
func TestTableDeterminism(t *testing.T) {
	a, b := NewTable(), NewTable()
	rng := rand.New(rand.NewPCG(5, 6))
	var ca, cb uint64
	var views []*TableView
	for i := range 100_000 {
		d := tabTestDigest(rng.Uint64N(40_000))
		switch op := rng.IntN(100); {
		case op < 60:
			a.Put(d, tabTestRecord(uint64(i)))
			b.Put(d, tabTestRecord(uint64(i)))
		case op < 90:
			if a.Delete(d) != b.Delete(d) {
				t.Fatal("Delete results differ")
			}
		case op < 99:
			m := uint64(i%5 + 2)
			drop := func(_ digest.Digest, r Record) bool { return r.Token%m == 0 }
			ca, cb = a.Sweep(ca, 500, drop), b.Sweep(cb, 500, drop)
			if ca != cb {
				t.Fatal("Sweep cursors differ")
			}
		default:
			views = append(views, a.Snapshot())
			if len(views) > 3 {
				views[0].Release()
				views = views[1:]
			}
		}
	}
	if !slices.Equal(tabCollect(a.Range), tabCollect(b.Range)) || a.Bytes() != b.Bytes() {
		t.Fatal("same operations, different layout")
	}
}

// TestTableRestoreLayout: a table rebuilt from a view and releveled has the
// original layout even when the original grew and shrank.
func TestTableRestoreLayout(t *testing.T) {
	tab := NewTable()
	for i := range uint64(100_000) {
		tab.Put(tabTestDigest(i), tabTestRecord(i))
		if i%3 == 0 {
			tab.Delete(tabTestDigest(i / 2))
		}
	}
	for i := range uint64(90_000) {
		tab.Delete(tabTestDigest(i))
	}
	tab.Sweep(0, 10_000, func(_ digest.Digest, r Record) bool { return r.Token%5 == 0 })
	v := tab.Snapshot()
	defer v.Release()
	restored := NewTable()
	v.Range(func(d digest.Digest, r Record) bool { restored.Put(d, r); return true })
	if err := restored.relevel(v.capLevels()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tabCollect(tab.Range), tabCollect(restored.Range)) || tab.Bytes() != restored.Bytes() {
		t.Fatal("restored table has a different layout")
	}
	for si := range tab.segs {
		if len(tab.segs[si].slots) != len(restored.segs[si].slots) {
			t.Fatalf("segment %d: capacity %d, restored %d", si, len(tab.segs[si].slots), len(restored.segs[si].slots))
		}
	}
	plain := NewTable()
	v.Range(func(d digest.Digest, r Record) bool { plain.Put(d, r); return true })
	if plain.Bytes() == tab.Bytes() {
		t.Fatal("history did not diverge from a plain rebuild; the test proves nothing")
	}
}

func TestTableSweep(t *testing.T) {
	tab, model := NewTable(), map[digest.Digest]Record{}
	for i := range uint64(20_000) {
		tab.Put(tabTestDigest(i), tabTestRecord(i))
		model[tabTestDigest(i)] = tabTestRecord(i)
	}
	// A pass in small steps without deletions visits every record once.
	seen := map[digest.Digest]int{}
	cursor, calls := uint64(0), 0
	for {
		cursor = tab.Sweep(cursor, 37, func(d digest.Digest, r Record) bool {
			seen[d]++
			return false
		})
		if calls++; cursor == 0 {
			break
		}
	}
	if len(seen) != len(model) || float64(calls) < float64(len(model))/tabLoadFactor(tab)/37 {
		t.Fatalf("pass saw %d of %d records in %d calls", len(seen), len(model), calls)
	}
	for d, c := range seen {
		if c != 1 {
			t.Fatalf("%v visited %d times", d, c)
		}
	}
	// A cursor from nowhere restarts at 0; n <= 0 visits nothing.
	visits := 0
	count := func(digest.Digest, Record) bool { visits++; return false }
	if c := tab.Sweep(^uint64(0), 5, count); c != 5 || visits == 0 {
		t.Fatalf("Sweep(bad cursor) = %x after %d visits", c, visits)
	}
	if c := tab.Sweep(3<<32|7, 0, count); c != 3<<32|7 {
		t.Fatalf("Sweep(n=0) = %x", c)
	}
	// One unbounded pass deletes every record drop asks for.
	drop := func(d digest.Digest, r Record) bool {
		if model[d] != r {
			t.Fatalf("drop(%v, %v): model has %v", d, r, model[d])
		}
		if r.Token%3 != 0 {
			return false
		}
		delete(model, d)
		return true
	}
	if c := tab.Sweep(0, math.MaxInt, drop); c != 0 {
		t.Fatalf("full pass returned cursor %x", c)
	}
	tabCheck(t, tab, model)
	// Bounded passes until nothing is left.
	all := func(d digest.Digest, r Record) bool { delete(model, d); return true }
	for cursor = tab.Sweep(0, 100, all); cursor != 0; cursor = tab.Sweep(cursor, 100, all) {
	}
	for tab.Len() > 0 {
		tab.Sweep(0, math.MaxInt, all)
	}
	tabCheck(t, tab, model)
}

func TestTableSnapshot(t *testing.T) {
	tab, model := NewTable(), map[digest.Digest]Record{}
	for i := range uint64(5000) {
		tab.Put(tabTestDigest(i), tabTestRecord(i))
		model[tabTestDigest(i)] = tabTestRecord(i)
	}
	v := tab.Snapshot()
	frozen := maps.Clone(model)
	for i := range uint64(5000) {
		if i%2 == 0 {
			tab.Delete(tabTestDigest(i))
			delete(model, tabTestDigest(i))
		} else {
			tab.Put(tabTestDigest(i+10_000), tabTestRecord(i))
			model[tabTestDigest(i+10_000)] = tabTestRecord(i)
		}
	}
	if v.Len() != len(frozen) {
		t.Fatalf("view Len = %d, want %d", v.Len(), len(frozen))
	}
	tabCheckContents(t, "view", v.Range, frozen)
	tabCheck(t, tab, model)
	v.Release()
	// Without live views, writes happen in place.
	tab.Snapshot().Release()
	gen := tab.segs[tabSegOf(tabTestDigest(3))].gen
	tab.Put(tabTestDigest(3), tabTestRecord(99))
	if tab.segs[tabSegOf(tabTestDigest(3))].gen != gen || len(tab.views) != 0 {
		t.Fatal("segment copied after the view was released")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Range on a released view did not panic")
		}
	}()
	v.Range(func(digest.Digest, Record) bool { return true })
}

// TestTableSnapshotConcurrent ranges views in other goroutines while the
// owner writes heavily (run with -race).
func TestTableSnapshotConcurrent(t *testing.T) {
	tab, model := NewTable(), map[digest.Digest]Record{}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range uint64(30_000) {
		tab.Put(tabTestDigest(i), tabTestRecord(i))
		model[tabTestDigest(i)] = tabTestRecord(i)
	}
	type result struct {
		got  []tabEntry
		want map[digest.Digest]Record
	}
	results := make(chan result)
	running := 0
	for round := range 6 {
		v, want := tab.Snapshot(), maps.Clone(model)
		running++
		go func() {
			var got []tabEntry
			for range 3 {
				got = tabCollect(v.Range)
			}
			v.Release()
			results <- result{got, want}
		}()
		for i := range 20_000 {
			k := rng.Uint64N(60_000)
			switch {
			case i%3 == 0:
				tab.Delete(tabTestDigest(k))
				delete(model, tabTestDigest(k))
			case i%997 == 0:
				tab.Sweep(uint64(i), 300, func(d digest.Digest, r Record) bool {
					if r.Token%2 == 0 {
						delete(model, d)
						return true
					}
					return false
				})
			default:
				tab.Put(tabTestDigest(k), tabTestRecord(uint64(round*100_000+i)))
				model[tabTestDigest(k)] = tabTestRecord(uint64(round*100_000 + i))
			}
		}
	}
	for range running {
		res := <-results
		tabCheckContents(t, "concurrent view", func(fn func(digest.Digest, Record) bool) {
			for _, e := range res.got {
				fn(e.d, e.r)
			}
		}, res.want)
	}
	tabCheck(t, tab, model)
}

// TestTableLoadFactor guards the memory design: the load factor stays high at
// every size, it does not drop after growth steps.
func TestTableLoadFactor(t *testing.T) {
	tab := NewTable()
	for i := range uint64(200_000) {
		tab.Put(tabTestDigest(i), tabTestRecord(i))
		if n := i + 1; n%10_000 == 0 && n >= 50_000 {
			if lf := tabLoadFactor(tab); lf < 0.7 || n == 100_000 && lf < 0.8 {
				t.Fatalf("load factor %.3f at %d keys", lf, n)
			}
		}
	}
}

func tabLoadFactor(t *Table) float64 {
	slots := 0
	for i := range t.segs {
		slots += len(t.segs[i].slots)
	}
	return float64(t.Len()) / float64(slots)
}

// TestTableProperty checks random operation sequences against a map model.
func TestTableProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		genDigest := tabDigestGen(rapid.IntRange(0, 2).Draw(rt, "space"))
		tab, model := NewTable(), map[digest.Digest]Record{}
		type snap struct {
			v    *TableView
			want map[digest.Digest]Record
		}
		var snaps []snap
		var cursor uint64
		genRecord := rapid.Custom(func(t *rapid.T) Record {
			return Record{Token: rapid.Uint64().Draw(t, "token"), Deadline: rapid.Int64().Draw(t, "deadline"),
				Meta: rapid.Uint64Min(1).Draw(t, "meta")}
		})
		pick := func(t *rapid.T) digest.Digest {
			if len(model) > 0 && rapid.Bool().Draw(t, "existing") {
				keys := tabSortedKeys(model)
				return rapid.SampledFrom(keys).Draw(t, "key")
			}
			return genDigest.Draw(t, "digest")
		}
		rt.Repeat(map[string]func(*rapid.T){
			"put": func(t *rapid.T) {
				d, r := pick(t), genRecord.Draw(t, "record")
				tab.Put(d, r)
				model[d] = r
			},
			"putMany": func(t *rapid.T) {
				seed := rapid.Uint64().Draw(t, "seed")
				for i := range uint64(rapid.IntRange(1, 300).Draw(t, "n")) {
					d := tabTestDigest(seed + i)
					tab.Put(d, tabTestRecord(i+1))
					model[d] = tabTestRecord(i + 1)
				}
			},
			"deleteMany": func(t *rapid.T) {
				keep := rapid.IntRange(0, 4).Draw(t, "keep")
				for i, d := range tabSortedKeys(model) {
					if i%5 >= keep {
						tab.Delete(d)
						delete(model, d)
					}
				}
			},
			"delete": func(t *rapid.T) {
				d := pick(t)
				_, ok := model[d]
				if tab.Delete(d) != ok {
					t.Fatalf("Delete(%v) != %v", d, ok)
				}
				delete(model, d)
			},
			"get": func(t *rapid.T) {
				d := pick(t)
				want, wok := model[d]
				if got, ok := tab.Get(d); ok != wok || got != want {
					t.Fatalf("Get(%v) = %v, %v; want %v, %v", d, got, ok, want, wok)
				}
			},
			"sweep": func(t *rapid.T) {
				n := rapid.IntRange(0, 64).Draw(t, "n")
				m := rapid.Uint64Range(1, 4).Draw(t, "mod")
				cursor = tab.Sweep(cursor, n, func(d digest.Digest, r Record) bool {
					if model[d] != r {
						t.Fatalf("drop(%v, %v): model has %v", d, r, model[d])
					}
					if r.Token%m != 0 {
						return false
					}
					delete(model, d)
					return true
				})
			},
			"snapshot": func(t *rapid.T) {
				snaps = append(snaps, snap{tab.Snapshot(), maps.Clone(model)})
			},
			"rangeView": func(t *rapid.T) {
				if len(snaps) == 0 {
					t.Skip("no views")
				}
				i := rapid.IntRange(0, len(snaps)-1).Draw(t, "view")
				v := snaps[i].v
				tabCheckContents(t, "view", v.Range, snaps[i].want)
				restored := NewTable()
				v.Range(func(d digest.Digest, r Record) bool { restored.Put(d, r); return true })
				if err := restored.relevel(v.capLevels()); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(tabCollect(restored.Range), tabCollect(v.Range)) {
					t.Fatalf("table restored from view has a different order")
				}
				if rapid.Bool().Draw(t, "release") {
					snaps[i].v.Release()
					snaps = slices.Delete(snaps, i, i+1)
				}
			},
			"": func(t *rapid.T) {
				tabCheck(t, tab, model)
			},
		})
		for _, s := range snaps {
			tabCheckContents(rt, "view at end", s.v.Range, s.want)
		}
	})
}

// digestGen draws digests from a tiny space (one segment, shared home slots
// at both ends of the array), a small one, or the full space.
func tabDigestGen(space int) *rapid.Generator[digest.Digest] {
	return rapid.Custom(func(t *rapid.T) digest.Digest {
		switch space {
		case 0:
			lo := rapid.Uint64Range(0, 5).Draw(t, "lo")
			if rapid.Bool().Draw(t, "top") {
				lo = math.MaxUint64 - lo
			}
			return digest.Digest{Hi: rapid.Uint64Range(0, 2).Draw(t, "hi"), Lo: lo}
		case 1:
			return digest.Digest{Hi: rapid.Uint64Range(0, 3).Draw(t, "hi") << 56, Lo: rapid.Uint64Range(0, 63).Draw(t, "lo") << 58}
		}
		return digest.Digest{Hi: rapid.Uint64().Draw(t, "hi"), Lo: rapid.Uint64().Draw(t, "lo")}
	})
}

func tabSortedKeys(m map[digest.Digest]Record) []digest.Digest {
	keys := make([]digest.Digest, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b digest.Digest) int {
		return cmp.Or(cmp.Compare(a.Hi, b.Hi), cmp.Compare(a.Lo, b.Lo))
	})
	return keys
}
