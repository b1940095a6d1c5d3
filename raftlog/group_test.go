package raftlog

import (
	"bytes"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestEmptyGroup(t *testing.T) {
	g := openStore(t, t.TempDir(), Options{}).Group(1)
	checkRange(t, g, 0, 0)
	var l raft.Log
	if err := g.GetLog(0, &l); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog(0) = %v, want raft.ErrLogNotFound", err)
	}
	v, err := g.Get([]byte("CurrentTerm"))
	if err == nil || err.Error() != "not found" || v != nil {
		t.Fatalf(`Get(missing) = %v, %v; want nil and an error reading exactly "not found"`, v, err)
	}
	n, err := g.GetUint64([]byte("CurrentTerm"))
	if err == nil || err.Error() != "not found" || n != 0 {
		t.Fatalf(`GetUint64(missing) = %d, %v; want 0 and "not found"`, n, err)
	}
	// raft itself must accept our misses as "no state".
	has, err := raft.HasExistingState(g, g, raft.NewInmemSnapshotStore())
	if err != nil || has {
		t.Fatalf("raft.HasExistingState on empty group = %v, %v; want false, nil", has, err)
	}
	if err := g.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if has, err := raft.HasExistingState(g, g, raft.NewInmemSnapshotStore()); err != nil || !has {
		t.Fatalf("raft.HasExistingState after setting a term = %v, %v; want true, nil", has, err)
	}
}

func TestStoreAndGetLogs(t *testing.T) {
	g := openStore(t, t.TempDir(), Options{}).Group(9)
	if err := g.StoreLogs(nil); err != nil {
		t.Fatalf("StoreLogs(nil) = %v", err)
	}
	mustStore(t, g, makeLogs(9, 1, 10, 1))
	if err := g.StoreLog(makeLogs(9, 11, 11, 2)[0]); err != nil {
		t.Fatal(err)
	}
	checkRange(t, g, 1, 11)

	want := &raft.Log{Index: 7, Term: 4, Type: raft.LogConfiguration, Data: []byte("cfg"),
		Extensions: []byte("x"), AppendedAt: time.Unix(1700000000, 123).UTC()}
	if err := g.StoreLog(want); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := g.GetLog(7, &got); err != nil || !logsEqual(&got, want) {
		t.Fatalf("GetLog(7) after overwrite = %+v, %v; want %+v", got, err, *want)
	}
	if err := g.StoreLogs([]*raft.Log{nil}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("StoreLogs([nil]) = %v, want ErrInvalidArgument", err)
	}
}

func TestDeleteRange(t *testing.T) {
	g := openStore(t, t.TempDir(), Options{}).Group(3)
	mustStore(t, g, makeLogs(3, 1, 20, 1))

	steps := []struct {
		min, max    uint64
		first, last uint64
	}{
		{1, 5, 6, 20},    // prefix compaction
		{15, 20, 6, 14},  // conflicting suffix
		{10, 9, 6, 14},   // min > max: no-op
		{0, 5, 6, 14},    // already gone
		{21, 100, 6, 14}, // beyond the end
		{6, 6, 7, 14},    // single entry, inclusive
		{14, 14, 7, 13},
	}
	for _, s := range steps {
		if err := g.DeleteRange(s.min, s.max); err != nil {
			t.Fatalf("DeleteRange(%d, %d): %v", s.min, s.max, err)
		}
		checkRange(t, g, s.first, s.last)
	}
	// Entries at the very top of the index space.
	top := &raft.Log{Index: math.MaxUint64, Term: 1, Data: payload(3, math.MaxUint64)}
	mustStore(t, g, []*raft.Log{top})
	if last, _ := g.LastIndex(); last != math.MaxUint64 {
		t.Fatalf("LastIndex = %d, want MaxUint64", last)
	}
	if err := g.DeleteRange(math.MaxUint64, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	checkRange(t, g, 7, 13)
	if err := g.DeleteRange(0, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	checkRange(t, g, 0, 0)
}

func TestStableStore(t *testing.T) {
	g := openStore(t, t.TempDir(), Options{}).Group(5)
	set := func(k, v string) {
		t.Helper()
		if err := g.Set([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	get := func(k string) []byte {
		t.Helper()
		v, err := g.Get([]byte(k))
		if err != nil {
			t.Fatalf("Get(%q): %v", k, err)
		}
		return v
	}
	set("a", "1")
	set("ab", "2") // "a" is a prefix of "ab": still distinct keys
	set("a", "3")  // overwrite
	if v := get("a"); string(v) != "3" {
		t.Fatalf("Get(a) = %q, want 3", v)
	}
	if v := get("ab"); string(v) != "2" {
		t.Fatalf("Get(ab) = %q, want 2", v)
	}
	set("empty", "")
	if v := get("empty"); v == nil || len(v) != 0 {
		t.Fatalf("Get(empty) = %#v, want non-nil empty slice", v)
	}
	v := get("a")
	v[0] = 'z'
	if v := get("a"); string(v) != "3" {
		t.Fatalf("Get returned a slice aliasing stored data: now %q", v)
	}

	for _, n := range []uint64{0, 1, math.MaxUint64} {
		if err := g.SetUint64([]byte("CurrentTerm"), n); err != nil {
			t.Fatal(err)
		}
		if got, err := g.GetUint64([]byte("CurrentTerm")); err != nil || got != n {
			t.Fatalf("GetUint64 = %d, %v; want %d", got, err, n)
		}
	}
	if _, err := g.GetUint64([]byte("ab")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetUint64 of a 1-byte value = %v, want ErrCorrupt", err)
	}
}

func TestGroupsAreIsolated(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	ids := []uint64{0, 1, 2, math.MaxUint64 - 1, math.MaxUint64}
	for _, id := range ids {
		g := s.Group(id)
		mustStore(t, g, makeLogs(id, 1, 10, 1))
		if err := g.SetUint64([]byte("k"), id); err != nil {
			t.Fatal(err)
		}
	}
	stableIs := func(id uint64, want bool) {
		t.Helper()
		n, err := s.Group(id).GetUint64([]byte("k"))
		if want && (err != nil || n != id) {
			t.Fatalf("group %d: stable key = %d, %v; want %d", id, n, err, id)
		}
		if !want && err != ErrKeyNotFound {
			t.Fatalf("group %d: stable key = %d, %v; want ErrKeyNotFound", id, n, err)
		}
	}

	// Wiping the whole log of group 1 and of the last group id (whose
	// upper bound is the end of the log kind) touches nothing else.
	for _, id := range []uint64{1, math.MaxUint64} {
		if err := s.Group(id).DeleteRange(0, math.MaxUint64); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if id == 1 || id == math.MaxUint64 {
			checkRange(t, s.Group(id), 0, 0)
		} else {
			checkRange(t, s.Group(id), 1, 10)
		}
		stableIs(id, true)
	}

	// Partial deletes and writes in group 2 leave its neighbours alone.
	if err := s.Group(2).DeleteRange(1, 4); err != nil {
		t.Fatal(err)
	}
	mustStore(t, s.Group(2), makeLogs(2, 11, 12, 2))
	checkRange(t, s.Group(2), 5, 12)
	checkRange(t, s.Group(0), 1, 10)
	checkRange(t, s.Group(math.MaxUint64-1), 1, 10)

	// DeleteGroup removes logs and stable keys of exactly one group.
	for _, id := range []uint64{2, math.MaxUint64} {
		if err := s.DeleteGroup(id); err != nil {
			t.Fatal(err)
		}
	}
	checkRange(t, s.Group(2), 0, 0)
	stableIs(2, false)
	stableIs(math.MaxUint64, false)
	checkRange(t, s.Group(0), 1, 10)
	checkRange(t, s.Group(math.MaxUint64-1), 1, 10)
	stableIs(0, true)
	stableIs(1, true)
	stableIs(math.MaxUint64-1, true)
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		g := s.Group(id)
		mustStore(t, g, makeLogs(id, 1, 100, 1))
		if err := g.DeleteRange(1, 10*id); err != nil {
			t.Fatal(err)
		}
		if err := g.SetUint64([]byte("CurrentTerm"), 7*id); err != nil {
			t.Fatal(err)
		}
		if err := g.Set([]byte("LastVoteCand"), []byte{byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, dir, Options{})
	for id := uint64(1); id <= 3; id++ {
		g := s.Group(id)
		checkRange(t, g, 10*id+1, 100)
		if n, err := g.GetUint64([]byte("CurrentTerm")); err != nil || n != 7*id {
			t.Fatalf("group %d: CurrentTerm = %d, %v; want %d", id, n, err, 7*id)
		}
		if v, err := g.Get([]byte("LastVoteCand")); err != nil || !bytes.Equal(v, []byte{byte(id)}) {
			t.Fatalf("group %d: LastVoteCand = %v, %v", id, v, err)
		}
	}
}

func TestGetLogDetectsCorruption(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	g := s.Group(1)
	// Write raw values behind the GroupStore's back.
	db, err := s.db.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(appendLogKey(nil, 1, 5), []byte{9, 9, 9}, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(appendLogKey(nil, 1, 6), appendLog(nil, &raft.Log{Index: 60}), nil); err != nil {
		t.Fatal(err)
	}
	s.db.Release()
	for _, idx := range []uint64{5, 6} {
		var l raft.Log
		if err := g.GetLog(idx, &l); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("GetLog(%d) = %v, want ErrCorrupt", idx, err)
		}
	}
}

func TestConcurrentGroups(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	const groups, batches, perBatch = 8, 40, 5
	var wg sync.WaitGroup
	for id := uint64(1); id <= groups; id++ {
		wg.Go(func() {
			g := s.Group(id)
			for b := range uint64(batches) {
				from := b*perBatch + 1
				if err := g.StoreLogs(makeLogs(id, from, from+perBatch-1, 1)); err != nil {
					t.Errorf("group %d: StoreLogs: %v", id, err)
					return
				}
				last, err := g.LastIndex()
				if err != nil || last != from+perBatch-1 {
					t.Errorf("group %d: LastIndex = %d, %v; want %d", id, last, err, from+perBatch-1)
					return
				}
				var l raft.Log
				if err := g.GetLog(from, &l); err != nil || string(l.Data) != string(payload(id, from)) {
					t.Errorf("group %d: GetLog(%d) = %q, %v", id, from, l.Data, err)
					return
				}
				// Compact this group's log as raft would, keeping 10 entries.
				if last > 10 {
					if err := g.DeleteRange(0, last-10); err != nil {
						t.Errorf("group %d: DeleteRange: %v", id, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for id := uint64(1); id <= groups; id++ {
		checkRange(t, s.Group(id), batches*perBatch-9, batches*perBatch)
	}
}

func TestClosedStore(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	g := s.Group(1)
	mustStore(t, g, makeLogs(1, 1, 3, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	var l raft.Log
	_, err1 := g.FirstIndex()
	_, err2 := g.LastIndex()
	_, err3 := g.Get([]byte("k"))
	_, err4 := g.GetUint64([]byte("k"))
	for i, err := range []error{
		err1, err2, err3, err4,
		g.GetLog(1, &l), g.StoreLog(&raft.Log{Index: 4}), g.StoreLogs(makeLogs(1, 5, 6, 1)),
		g.DeleteRange(1, 2), g.Set([]byte("k"), nil), g.SetUint64([]byte("k"), 1), s.DeleteGroup(1),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("operation %d after Close = %v, want ErrClosed", i, err)
		}
	}
}
