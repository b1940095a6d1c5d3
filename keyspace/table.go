package keyspace

import (
	"fmt"
	"math/bits"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/l4xg/grid/digest"
)

// Table is the hot tier: an open-addressing hash table of fixed-size
// {Digest, Record} slots (40 bytes each) held in a few large arrays, with no
// per-key pointers or allocations.
//
// Layout. The table is split into tabSegs (256) segments chosen by the top
// bits of Digest.Hi (the shard slot map uses the low 32 bits of Hi, so the two
// are independent). Each segment is a Robin Hood linear-probing table over one
// []tabSlot of any capacity; a digest's home slot is fastrange(Lo, capacity).
// Slots of equal home are ordered by (Lo, Hi), which makes a segment's layout a
// pure function of its key set and capacity (history independence). Deletion
// shifts entries back; there are no tombstones.
//
// Growth. A segment grows by 1/tabGrowDen (12.5%) when an insert would push its
// load past tabLoadNum/tabLoadDen (92%), so a growth step copies one segment,
// 1/256 of the table, never the whole table. Capacities follow a geometric
// sequence per segment, staggered by segment index, so segments reach their
// growth points at evenly spread key counts instead of all at once: the
// table-wide load stays near 0.87 at large sizes instead of oscillating. A
// segment shrinks when its load falls under tabShrinkNum/tabShrinkDen (37.5%).
// All capacity arithmetic is integer, identical on every platform.
//
// Determinism. The layout, Range order and Sweep order depend only on the
// sequence of Put/Delete/Sweep calls (and the drop decisions), never on
// timing, snapshots or the platform: replicas applying the same commands hold
// the same layout.
//
// Concurrency. A Table has one owner goroutine: no two methods may run
// concurrently, and fn/drop callbacks must not modify the table. The only
// concurrent access supported is through a TableView (see Snapshot).
//
// The zero Table is not usable; call NewTable.
type Table struct {
	segs  [tabSegs]tabSegment
	n     int
	gen   uint64       // generation stamped on slot arrays allocated now
	share uint64       // arrays with gen <= share may be shared with a live view
	views []*TableView // views that may still be live, oldest first
}

// TableView is a read-only, point-in-time view of a Table created by
// Table.Snapshot. It shares slot arrays with the table copy-on-write, so it is
// cheap to create. Range and Len may be called from any goroutine, also while
// the table's owner keeps writing the table; a view itself must not be used
// from two goroutines at once. Release must be called once the view is no
// longer needed (from any goroutine); until then the table copies every
// segment it writes once, and the view keeps those copies alive. The view must
// not be used after Release.
type TableView struct {
	segs     *[tabSegs]tabSegment
	n        int
	gen      uint64
	released atomic.Bool
}

const (
	tabSegBits = 8
	tabSegs    = 1 << tabSegBits

	tabMinCap    = 8  // capacity of a segment's first slot array
	tabGrowDen   = 8  // growth factor 1 + 1/tabGrowDen
	tabLoadNum   = 59 // maximum load tabLoadNum/tabLoadDen
	tabLoadDen   = 64
	tabShrinkNum = 3 // shrink below load tabShrinkNum/tabShrinkDen
	tabShrinkDen = 8

	// Slot arrays larger than tabMaxSmallAlloc are rounded up to whole heap
	// pages, which the Go allocator would reserve for them anyway.
	tabPageSize      = 8192
	tabMaxSmallAlloc = 32768

	tabSlotSize = int(unsafe.Sizeof(tabSlot{}))
)

type tabSlot struct {
	d digest.Digest
	r Record // r.Meta == 0: empty
}

type tabSegment struct {
	slots []tabSlot
	count uint32
	level uint32 // index into the capacity sequence (see tabCap)
	gen   uint64 // Table.gen when slots was allocated
}

// NewTable returns an empty table. Segments allocate their slot arrays on
// first insert, so an empty table costs about 10 KB.
func NewTable() *Table {
	return &Table{gen: 1}
}

func tabSegOf(d digest.Digest) int { return int(d.Hi >> (64 - tabSegBits)) }

// tabHome is the fastrange reduction of lo onto [0, n).
func tabHome(lo uint64, n int) int {
	hi, _ := bits.Mul64(lo, uint64(n))
	return int(hi)
}

// tabLess orders digests of equal home slot: by Lo (which fastrange maps
// monotonically), then Hi.
func tabLess(a, b digest.Digest) bool {
	return a.Lo < b.Lo || a.Lo == b.Lo && a.Hi < b.Hi
}

// find returns the position of d in the segment and true, or the position
// where d belongs and false. The segment must have slots.
func (s *tabSegment) find(d digest.Digest) (int, bool) {
	n := len(s.slots)
	p := tabHome(d.Lo, n)
	for dist := 0; ; dist++ {
		e := &s.slots[p]
		if e.r.Meta == 0 {
			return p, false
		}
		if e.d == d {
			return p, true
		}
		ed := p - tabHome(e.d.Lo, n)
		if ed < 0 {
			ed += n
		}
		if ed < dist || ed == dist && tabLess(d, e.d) {
			return p, false
		}
		if p++; p == n {
			p = 0
		}
	}
}

// insertAt stores x at p, shifting the run from p to the next empty slot one
// place forward. There must be an empty slot.
func (s *tabSegment) insertAt(p int, x tabSlot) {
	a := s.slots
	n := len(a)
	q := p
	for a[q].r.Meta != 0 {
		if q++; q == n {
			q = 0
		}
	}
	if q >= p {
		copy(a[p+1:q+1], a[p:q])
	} else {
		copy(a[1:q+1], a[:q])
		a[0] = a[n-1]
		copy(a[p+1:], a[p:n-1])
	}
	a[p] = x
}

// deleteAt empties slot p and shifts the displaced entries after it back.
func (s *tabSegment) deleteAt(p int) {
	a := s.slots
	n := len(a)
	last := p // last slot of the shifted range
	for {
		q := last + 1
		if q == n {
			q = 0
		}
		if a[q].r.Meta == 0 || tabHome(a[q].d.Lo, n) == q {
			break
		}
		last = q
	}
	if last >= p {
		copy(a[p:last], a[p+1:last+1])
	} else {
		copy(a[p:n-1], a[p+1:])
		a[n-1] = a[0]
		copy(a[:last], a[1:last+1])
	}
	a[last] = tabSlot{}
}

// tabCap is the capacity of segment si at level. Level L has base capacity
// tabMinCap*(1+1/tabGrowDen)^L; segment si adds si/tabSegs of one growth step, so
// the segments' growth points are spread evenly.
func tabCap(si int, level uint32) int {
	b := uint64(tabMinCap) << 16
	for range level {
		b += b / tabGrowDen
	}
	c := int(b * uint64(tabSegs*tabGrowDen+si) / (tabSegs * tabGrowDen) >> 16)
	if c*tabSlotSize > tabMaxSmallAlloc {
		c = (c*tabSlotSize + tabPageSize - 1) &^ (tabPageSize - 1) / tabSlotSize
	}
	return c
}

// fits reports whether count entries fit in capacity c at the maximum load.
func tabFits(count, c int) bool { return count*tabLoadDen <= c*tabLoadNum }

// resize rebuilds segment si at the given level in a fresh array. Entries are
// placed in (Lo, Hi) order, so each lands at max(home, previous+1) without
// probing; only the few that run past the end wrap around via insertAt.
func (t *Table) resize(si int, level uint32) {
	s := &t.segs[si]
	old := s.slots
	n := len(old)
	s.slots = make([]tabSlot, tabCap(si, level))
	s.level = level
	s.gen = t.gen
	// Entries at 0..k-1 wrapped around from the end: they sort last.
	k := 0
	for k < n && old[k].r.Meta != 0 && tabHome(old[k].d.Lo, n) > k {
		k++
	}
	s.place(old[:k], s.place(old[k:], -1))
}

// place appends the occupied entries of src, sorted by (Lo, Hi) and larger
// than every entry placed so far, after position prev. It returns the new
// last position, or len(s.slots) once entries have wrapped.
func (s *tabSegment) place(src []tabSlot, prev int) int {
	n := len(s.slots)
	for i := range src {
		e := &src[i]
		if e.r.Meta == 0 {
			continue
		}
		if p := max(tabHome(e.d.Lo, n), prev+1); p < n {
			s.slots[p] = *e
			prev = p
			continue
		}
		p, _ := s.find(e.d)
		s.insertAt(p, *e)
		prev = n
	}
	return prev
}

// own makes segment si safe to write in place: if a live view may share its
// slot array, the array is copied first.
func (t *Table) own(si int) {
	s := &t.segs[si]
	if s.gen > t.share {
		return
	}
	t.pruneViews()
	if s.gen > t.share {
		return
	}
	a := make([]tabSlot, len(s.slots))
	copy(a, s.slots)
	s.slots = a
	s.gen = t.gen
}

// pruneViews forgets released views and recomputes share.
func (t *Table) pruneViews() {
	live := t.views[:0]
	for _, v := range t.views {
		if !v.released.Load() {
			live = append(live, v)
		}
	}
	clear(t.views[len(live):])
	t.views = live
	t.share = 0
	if len(live) > 0 {
		t.share = live[len(live)-1].gen
	}
}

// touch reads d's home slot (for Machine.prefetch) and returns a word of it.
func (t *Table) touch(d digest.Digest) uint64 {
	s := &t.segs[tabSegOf(d)]
	if len(s.slots) == 0 {
		return 0
	}
	return s.slots[tabHome(d.Lo, len(s.slots))].r.Meta
}

// Get returns the record stored for d.
func (t *Table) Get(d digest.Digest) (Record, bool) {
	s := &t.segs[tabSegOf(d)]
	if len(s.slots) == 0 {
		return Record{}, false
	}
	if p, ok := s.find(d); ok {
		return s.slots[p].r, true
	}
	return Record{}, false
}

// placements finds the records stored under d with any slot bits (the low
// 32 bits of Hi, which digest.Record takes from an entity): the same key
// placed on this shard by another entity, or by none. Such digests share
// d's segment (the top bits of Hi), home slot and Lo, so they sit next to
// each other in d's probe run, ordered by Hi; the search scans that run
// alone. It returns the one whose token is token if any (held), and the
// lowest of them (first); ok flags say which were found.
func (t *Table) placements(d digest.Digest, token uint64) (held digest.Digest, heldOK bool, first digest.Digest, firstOK bool) {
	s := &t.segs[tabSegOf(d)]
	n := len(s.slots)
	if n == 0 {
		return
	}
	low := digest.Digest{Hi: d.Hi &^ digest.SlotMask, Lo: d.Lo}
	p, _ := s.find(low)
	for range n {
		e := &s.slots[p]
		if e.r.Meta == 0 || e.d.Lo != d.Lo || e.d.Hi&^digest.SlotMask != low.Hi {
			break
		}
		if !firstOK {
			first, firstOK = e.d, true
		}
		if e.r.Token == token {
			return e.d, true, first, firstOK
		}
		if p++; p == n {
			p = 0
		}
	}
	return
}

// Put stores r for d, inserting or overwriting. It panics if r.Meta == 0.
func (t *Table) Put(d digest.Digest, r Record) {
	if r.Meta == 0 {
		panic("keyspace: Table.Put of a record with Meta == 0")
	}
	si := tabSegOf(d)
	s := &t.segs[si]
	if len(s.slots) == 0 {
		t.resize(si, 0)
	}
	p, ok := s.find(d)
	if ok {
		if s.slots[p].r != r {
			t.own(si)
			s.slots[p].r = r
		}
		return
	}
	if c := int(s.count) + 1; !tabFits(c, len(s.slots)) {
		level := s.level + 1
		for !tabFits(c, tabCap(si, level)) {
			level++
		}
		t.resize(si, level)
		p, _ = s.find(d)
	} else {
		t.own(si)
	}
	s.insertAt(p, tabSlot{d, r})
	s.count++
	t.n++
}

// Delete removes d and reports whether it was present.
func (t *Table) Delete(d digest.Digest) bool {
	si := tabSegOf(d)
	s := &t.segs[si]
	if len(s.slots) == 0 {
		return false
	}
	p, ok := s.find(d)
	if !ok {
		return false
	}
	t.remove(si, p)
	t.maybeShrink(si, 0)
	return true
}

func (t *Table) remove(si, p int) {
	t.own(si)
	s := &t.segs[si]
	s.deleteAt(p)
	s.count--
	t.n--
}

// maybeShrink shrinks segment si if its load is below the shrink threshold,
// to the smallest level at which it is as full as right after a growth step.
// It returns cursor position p mapped proportionally into the new array.
func (t *Table) maybeShrink(si, p int) int {
	s := &t.segs[si]
	n, c := len(s.slots), int(s.count)
	if s.level == 0 || c*tabShrinkDen >= n*tabShrinkNum {
		return p
	}
	level := uint32(0)
	for level < s.level && !tabFits(c*(tabGrowDen+1), tabCap(si, level)*tabGrowDen) {
		level++
	}
	t.resize(si, level)
	return int(uint64(p) * uint64(len(s.slots)) / uint64(n))
}

// Len returns the number of records.
func (t *Table) Len() int { return t.n }

// Bytes returns the bytes held by the table's slot arrays plus its fixed
// overhead. Copies kept alive only by views are not counted.
func (t *Table) Bytes() int {
	b := int(unsafe.Sizeof(*t))
	for i := range t.segs {
		b += len(t.segs[i].slots) * tabSlotSize
	}
	return b
}

// Range calls fn for every record in a deterministic order (segment by
// segment, slot by slot) until fn returns false. fn must not modify t.
func (t *Table) Range(fn func(d digest.Digest, r Record) bool) {
	tabRange(&t.segs, fn)
}

func tabRange(segs *[tabSegs]tabSegment, fn func(d digest.Digest, r Record) bool) {
	for i := range segs {
		for j := range segs[i].slots {
			if e := &segs[i].slots[j]; e.r.Meta != 0 && !fn(e.d, e.r) {
				return
			}
		}
	}
}

// Sweep visits up to n slots in the global slot order (segment by segment,
// slot by slot), starting at cursor, which is 0 or a value returned by an
// earlier Sweep. It calls drop for every record found and deletes the record
// if drop returns true; drop must not modify t. After a deletion the slot is
// visited again, since a later record may have shifted into it; records moved
// by deletions or by intervening resizes may be visited twice or skipped
// within one pass, but a record is only ever removed when drop asked for it.
// Sweep returns the cursor to continue from; it stops at the end of the order
// and returns 0 there, so 0 marks a completed pass.
func (t *Table) Sweep(cursor uint64, n int, drop func(d digest.Digest, r Record) bool) uint64 {
	si, p := int(cursor>>32), int(uint32(cursor))
	if si >= tabSegs {
		si, p = 0, 0
	}
	for n > 0 {
		s := &t.segs[si]
		removed := false
		for ; p < len(s.slots) && n > 0; n-- {
			if e := &s.slots[p]; e.r.Meta != 0 && drop(e.d, e.r) {
				t.remove(si, p)
				removed = true
				continue
			}
			p++
		}
		if removed {
			p = t.maybeShrink(si, p)
		}
		if p < len(s.slots) {
			break
		}
		if si, p = si+1, 0; si == tabSegs {
			return 0
		}
	}
	return uint64(si)<<32 | uint64(p)
}

// Snapshot returns a point-in-time view of t in O(tabSegs) time. The view
// shares t's slot arrays; t copies a shared segment before its first
// subsequent write (copy-on-write per segment). See TableView for the rules.
func (t *Table) Snapshot() *TableView {
	t.pruneViews()
	v := &TableView{segs: new([tabSegs]tabSegment), n: t.n, gen: t.gen}
	*v.segs = t.segs
	t.views = append(t.views, v)
	t.share = t.gen
	t.gen++
	return v
}

// Range calls fn for every record of the view, in the order Table.Range
// would have used at snapshot time, until fn returns false.
func (v *TableView) Range(fn func(d digest.Digest, r Record) bool) {
	if v.released.Load() {
		panic("keyspace: Range on a released TableView")
	}
	tabRange(v.segs, fn)
}

// capLevels returns each segment's capacity level plus one (0: no array).
// Since a segment's layout is a function of its keys and capacity, a table
// fed the view's records by Put and then given these levels by relevel has
// exactly the original layout, so Sweep cursors stay meaningful across a
// snapshot restore. The levels depend on the tab* tuning constants.
func (v *TableView) capLevels() []uint32 {
	levels := make([]uint32, tabSegs)
	for i := range v.segs {
		if len(v.segs[i].slots) > 0 {
			levels[i] = v.segs[i].level + 1
		}
	}
	return levels
}

// relevel gives every segment the capacity level recorded by capLevels. A
// segment's layout is a function of its keys and its capacity, so a table
// rebuilt by Put and then releveled has exactly the layout of the table the
// levels were taken from, and Sweep cursors stay meaningful across a snapshot
// restore. Levels that cannot hold the segment's records, or that are far
// larger than any table holding them would have, are refused, so corrupt
// input cannot make it allocate without bound.
// load fills segment si, still empty, with recs (the segment's records, as a
// snapshot lists them) in a slot array at the given level, in one pass: recs
// are sorted by (Lo, Hi) and placed in order, as resize does, instead of
// probing one insert at a time (which a snapshot's slot order turns into long
// probe runs). recs is reordered. The layout is the one inserts would give:
// a segment's layout is a function of its contents and capacity.
func (t *Table) load(si int, level uint32, recs []tabSlot) error {
	s := &t.segs[si]
	if s.count != 0 || len(s.slots) != 0 {
		return fmt.Errorf("segment %d listed twice", si)
	}
	if level >= 160 { // far beyond any real table; keeps tabCap from overflowing
		return fmt.Errorf("segment %d level %d out of range", si, level+1)
	}
	c := tabCap(si, level)
	if !tabFits(len(recs), c) || c > 4*len(recs)+1024 {
		return fmt.Errorf("segment %d: capacity %d does not fit %d records", si, c, len(recs))
	}
	slices.SortFunc(recs, func(a, b tabSlot) int {
		switch {
		case tabLess(a.d, b.d):
			return -1
		case tabLess(b.d, a.d):
			return 1
		}
		return 0
	})
	for i := 1; i < len(recs); i++ {
		if recs[i].d == recs[i-1].d {
			return fmt.Errorf("segment %d lists digest %v twice", si, recs[i].d)
		}
	}
	s.slots = make([]tabSlot, c)
	s.level = level
	s.gen = t.gen
	s.place(recs, -1)
	s.count = uint32(len(recs))
	t.n += len(recs)
	return nil
}

func (t *Table) relevel(levels []uint32) error {
	if len(levels) != tabSegs {
		return fmt.Errorf("%d segment levels, want %d", len(levels), tabSegs)
	}
	for i, l := range levels {
		s := &t.segs[i]
		if l == 0 {
			if s.count != 0 {
				return fmt.Errorf("segment %d holds %d records but has no array", i, s.count)
			}
			continue
		}
		if l > 160 { // far beyond any real table; keeps tabCap from overflowing
			return fmt.Errorf("segment %d level %d out of range", i, l)
		}
		c := tabCap(i, l-1)
		if !tabFits(int(s.count), c) || c > 4*int(s.count)+1024 {
			return fmt.Errorf("segment %d: capacity %d does not fit %d records", i, c, s.count)
		}
		if len(s.slots) == 0 || s.level != l-1 {
			t.resize(i, l-1)
		}
	}
	return nil
}

// Len returns the number of records in the view.
func (v *TableView) Len() int { return v.n }

// Release tells the table that the view is no longer used. It may be called
// from any goroutine, concurrently with writes to the table; later calls are
// no-ops.
func (v *TableView) Release() {
	if !v.released.Swap(true) {
		v.segs = nil // the table may keep v in its list for a while
	}
}
