package raftlog

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// segments returns the journal's segment files.
func segments(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sameAs asserts that g holds exactly what model holds.
func sameAs(t *testing.T, g *JournalGroup, model *raft.InmemStore, step int) {
	t.Helper()
	mf, _ := model.FirstIndex()
	ml, _ := model.LastIndex()
	if ml == 0 {
		mf = 0
	}
	gf, _ := g.FirstIndex()
	gl, _ := g.LastIndex()
	if gf != mf || gl != ml {
		t.Fatalf("step %d: group %d holds [%d, %d], model [%d, %d]", step, g.ID(), gf, gl, mf, ml)
	}
	for i := gf; i <= gl && gl != 0; i++ {
		var got, want raft.Log
		if err := g.GetLog(i, &got); err != nil {
			t.Fatalf("step %d: group %d: GetLog(%d): %v", step, g.ID(), i, err)
		}
		if err := model.GetLog(i, &want); err != nil {
			t.Fatalf("step %d: model GetLog(%d): %v", step, i, err)
		}
		if !logsEqual(&got, &want) {
			t.Fatalf("step %d: group %d: log %d = %+v, want %+v", step, g.ID(), i, got, want)
		}
	}
	for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
		// raft's in-memory store answers 0 for a key never set.
		want, _ := model.GetUint64([]byte(k))
		got, err := g.GetUint64([]byte(k))
		if got != want || (err != nil && (want != 0 || !errors.Is(err, ErrKeyNotFound))) {
			t.Fatalf("step %d: group %d: %s = %d, %v; model %d", step, g.ID(), k, got, err, want)
		}
	}
}

// The journal behaves as raft's own in-memory store under the operations
// raft makes (appends, overwritten suffixes, prefix compaction, deleting
// everything, stable values), across reopens, with segments small enough
// that the run rolls, copies forward and removes many of them.
func TestJournalMatchesInmemStore(t *testing.T) {
	dir := t.TempDir()
	opts := JournalOptions{SegmentSize: 8 << 10, NoSync: true}
	j, err := OpenJournal(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { j.Close() }()
	const groups = 4
	models := make([]*raft.InmemStore, groups+1)
	for id := range models {
		models[id] = raft.NewInmemStore()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	term := uint64(1)
	maxSegments := 0
	var copies, reaped uint64 // over every Journal the run opened
	for step := 0; step < 3000; step++ {
		id := uint64(1 + rng.IntN(groups))
		// Group 4 is idle most of the time: its entries must be copied
		// forward rather than keep old segments alive.
		if id == groups && rng.IntN(20) != 0 {
			id = 1
		}
		g, m := j.Group(id), models[id]
		first, _ := g.FirstIndex()
		last, _ := g.LastIndex()
		switch r := rng.IntN(100); {
		case r < 60: // append, sometimes over a conflicting suffix
			from := last + 1
			if last > first && rng.IntN(5) == 0 {
				from = last - uint64(rng.IntN(int(last-first)))
				if err := g.DeleteRange(from, last); err != nil {
					t.Fatal(err)
				}
				m.DeleteRange(from, last)
			}
			if first == 0 && last == 0 {
				from = 1 + uint64(rng.IntN(50))
			}
			logs := makeLogs(id, from, from+uint64(rng.IntN(8)), term)
			for _, l := range logs {
				l.Data = append(l.Data, make([]byte, rng.IntN(300))...)
			}
			if err := g.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			if err := m.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
		case r < 80 && last > first: // compact a prefix
			to := first + uint64(rng.IntN(int(last-first)))
			if err := g.DeleteRange(first, to); err != nil {
				t.Fatal(err)
			}
			m.DeleteRange(first, to)
		case r < 82 && last > 0: // a snapshot restore: everything goes
			if err := g.DeleteRange(first, last); err != nil {
				t.Fatal(err)
			}
			m.DeleteRange(first, last)
		case r < 95:
			term++
			if err := g.SetUint64([]byte("CurrentTerm"), term); err != nil {
				t.Fatal(err)
			}
			m.SetUint64([]byte("CurrentTerm"), term)
		default: // reopen
			copies, reaped = copies+j.copiedForward.Load(), reaped+j.reaped.Load()
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if j, err = OpenJournal(dir, opts); err != nil {
				t.Fatalf("step %d: reopen: %v", step, err)
			}
		}
		for id := uint64(1); id <= groups; id++ {
			sameAs(t, j.Group(id), models[id], step)
		}
		maxSegments = max(maxSegments, len(segments(t, dir)))
	}
	copies, reaped = copies+j.copiedForward.Load(), reaped+j.reaped.Load()
	t.Logf("at most %d segments on disk; %d copies forward, %d segments removed", maxSegments, copies, reaped)
	if reaped == 0 || copies == 0 {
		t.Fatalf("the run removed %d segments and copied forward %d times; it should do both", reaped, copies)
	}
	if maxSegments > copyForwardAfter+6 {
		t.Fatalf("up to %d segments on disk; old ones are not removed", maxSegments)
	}
}

func TestJournalRefusesAHole(t *testing.T) {
	j := openJournal(t, t.TempDir(), JournalOptions{NoSync: true})
	g := j.Group(1)
	if err := g.StoreLogs(makeLogs(1, 1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteRange(3, 5); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("DeleteRange(3, 5) of [1, 10] = %v, want ErrInvalidArgument", err)
	}
	if err := g.StoreLogs([]*raft.Log{{Index: 11}, {Index: 13}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("StoreLogs of 11 and 13 = %v, want ErrInvalidArgument", err)
	}
	checkRange(t, g, 1, 10)
}

// Every acknowledged write is fdatasynced; NoSync writes are not.
func TestJournalWritesAreSynced(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		j := openJournal(t, t.TempDir(), JournalOptions{NoSync: noSync})
		g := j.Group(1)
		before := j.WriteStats().Fsyncs
		const writes = 20
		for i := uint64(1); i <= writes/4; i++ {
			mustStore(t, g, makeLogs(1, i, i, 1))
			if err := g.SetUint64([]byte("CurrentTerm"), i); err != nil {
				t.Fatal(err)
			}
			if err := g.Set([]byte("LastVoteCand"), []byte("n1")); err != nil {
				t.Fatal(err)
			}
			if err := g.DeleteRange(i, i); err != nil {
				t.Fatal(err)
			}
		}
		syncs := j.WriteStats().Fsyncs - before
		if !noSync && syncs < writes {
			t.Errorf("%d synced writes, one after the other, took %d fdatasyncs; want %d", writes, syncs, writes)
		}
		if noSync && syncs != 0 {
			t.Errorf("NoSync: %d writes took %d fdatasyncs, want none", writes, syncs)
		}
	}
}

// Concurrent writers of different groups share fdatasyncs (group commit),
// and each finds its own entries afterwards.
func TestJournalGroupsShareSyncs(t *testing.T) {
	j := openJournal(t, t.TempDir(), JournalOptions{SegmentSize: testSegmentSize})
	const groups, batches = 8, 50
	var wg sync.WaitGroup
	for id := uint64(1); id <= groups; id++ {
		wg.Go(func() {
			g := j.Group(id)
			for i := uint64(1); i <= batches; i++ {
				if err := g.StoreLogs(makeLogs(id, 4*i-3, 4*i, 1)); err != nil {
					t.Errorf("group %d: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := j.WriteStats()
	t.Logf("%d synced writes from %d groups took %d fdatasyncs", st.Writes, groups, st.Fsyncs)
	if st.Writes != groups*batches || st.Fsyncs >= st.Writes {
		t.Fatalf("%d writes took %d fdatasyncs; want %d writes sharing fewer syncs", st.Writes, st.Fsyncs, groups*batches)
	}
	for id := uint64(1); id <= groups; id++ {
		checkRange(t, j.Group(id), 1, 4*batches)
	}
}

// Logs that are never compacted fill their segments: copying them forward
// would only write them again, so the journal does not, however many
// segments they span.
func TestJournalDoesNotCopyLiveLogs(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir, JournalOptions{SegmentSize: 4 << 10, NoSync: true})
	for i := uint64(1); i <= 2000; i += 10 {
		for id := uint64(1); id <= 3; id++ {
			mustStore(t, j.Group(id), makeLogs(id, i, i+9, 1))
		}
	}
	if n := j.copiedForward.Load(); n != 0 {
		t.Fatalf("%d copies forward of logs that fill their segments", n)
	}
	if n := len(segments(t, dir)); n < 2*copyForwardAfter {
		t.Fatalf("%d segments; the test means to span more than %d", n, 2*copyForwardAfter)
	}
	for id := uint64(1); id <= 3; id++ {
		checkRange(t, j.Group(id), 1, 2000)
	}
}

// A write larger than one record can hold is refused before anything is
// written: replay would take it for corruption.
func TestJournalRefusesAnOversizedWrite(t *testing.T) {
	j := openJournal(t, t.TempDir(), JournalOptions{NoSync: true})
	g := j.Group(1)
	data := make([]byte, maxRecordLen)
	big := &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: data}
	if err := g.StoreLogs([]*raft.Log{big}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("StoreLogs of %d bytes = %v, want ErrInvalidArgument", len(big.Data), err)
	}
	// Entries each within the bound, over it together.
	halves := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: data[:maxRecordLen/2]},
		{Index: 2, Term: 1, Type: raft.LogCommand, Data: data[maxRecordLen/2-8:]},
	}
	if err := g.StoreLogs(halves); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("StoreLogs of two entries over %d bytes together = %v, want ErrInvalidArgument", maxRecordLen, err)
	}
	if err := g.Set([]byte("k"), data); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Set of %d bytes = %v, want ErrInvalidArgument", maxRecordLen, err)
	}
	mustStore(t, g, makeLogs(1, 1, 3, 1))
	checkRange(t, g, 1, 3)
}

// Frames stay within the preallocated segment: a write that would not
// fit goes to the next one, so no sync has a file size to update.
func TestJournalFramesStayInTheirSegment(t *testing.T) {
	const size = 4 << 10
	dir := t.TempDir()
	j := openJournal(t, dir, JournalOptions{SegmentSize: size, NoSync: true})
	for i := uint64(1); i <= 400; i++ {
		mustStore(t, j.Group(1), makeLogs(1, i, i, 1))
		if j.off > size {
			t.Fatalf("after entry %d segment %d holds %d bytes, more than its %d", i, j.segID, j.off, size)
		}
	}
	for _, p := range segments(t, dir) {
		if st, err := os.Stat(p); err != nil || st.Size() != size {
			t.Fatalf("%s: %v, %v; want %d bytes", p, st.Size(), err, size)
		}
	}
}
