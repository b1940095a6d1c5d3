package tiering

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

func TestPutGetDeleteSeesPendingBatch(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(1)
	if s.Shard(1) != sh {
		t.Fatal("Shard(1) returned a second handle")
	}
	d0, d1, d2 := keyDigest("ns", 0), keyDigest("ns", 1), keyDigest("ns", 2)
	r0, r1 := settled(0, 1000, 5000), settled(1, 1000, 6000)
	mustMiss(t, sh, d0)
	sh.Put(d0, &r0)
	sh.Put(d1, &r1)
	mustGet(t, sh, d0, r0) // from the pending batch
	mustFlush(t, sh)
	mustGet(t, sh, d0, r0) // from the database
	mustGet(t, sh, d1, r1)
	mustMiss(t, sh, d2)

	got, _ := sh.Get(d0)
	got.Result[0] = 'X' // the caller owns the copy
	mustGet(t, sh, d0, r0)

	sh.Delete(d0)
	mustMiss(t, sh, d0) // pending delete
	sh.Delete(d2)       // not held: no-op
	mustFlush(t, sh)
	mustMiss(t, sh, d0)
	mustGet(t, sh, d1, r1)
	if n := rawKeys(t, s, 1); n[kindRecord] != 1 || n[kindExpiry] != 1 || n[kindAudit] != 1 {
		t.Fatalf("keys by kind = %v, want one of each", n)
	}

	st := sh.Stats()
	if st.Keys != 1 || st.Puts != 2 || st.Deletes != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if want := recordBytes(valueHeaderLen + len(r1.Result)); st.Bytes != want {
		t.Fatalf("Bytes = %d, want %d", st.Bytes, want)
	}
	if st.Lookups == 0 || st.Hits == 0 || st.LookupLatency.Count == 0 || len(st.LookupLatency.Counts) != len(st.LookupLatency.Bounds)+1 {
		t.Fatalf("lookup stats = %+v", st)
	}
}

func TestPutAfterDeleteInOneBatch(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(0)
	d := keyDigest("ns", 7)
	a, b := settled(7, 100, 200), settled(8, 300, 900)
	sh.Put(d, &a)
	mustFlush(t, sh)
	sh.Delete(d)
	sh.Put(d, &b)
	mustGet(t, sh, d, b)
	mustFlush(t, sh)
	mustGet(t, sh, d, b)
	if n := sh.Purge(200, 10); n != 0 {
		t.Fatalf("Purge(200) removed %d, the old index entry should be gone", n)
	}
	if n := sh.Purge(900, 10); n != 1 {
		t.Fatalf("Purge(900) removed %d, want 1", n)
	}
}

func TestShardsAreSeparate(t *testing.T) {
	s := openTest(t, testOptions())
	a, b := s.Shard(1), s.Shard(^uint32(0))
	d := keyDigest("ns", 1)
	r := settled(1, 10, 20)
	a.Put(d, &r)
	mustFlush(t, a)
	mustMiss(t, b, d)
	b.Put(d, &r)
	mustFlush(t, b)
	if err := b.Wipe(); err != nil {
		t.Fatal(err)
	}
	mustMiss(t, b, d)
	mustGet(t, a, d, r)
}

func TestPurgeOrderLimitAndIndexes(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(2)
	// Deadlines 10, 20, ..., 100, and one negative one.
	for i := 1; i <= 10; i++ {
		r := settled(i, 5, int64(i*10))
		sh.Put(keyDigest("ns", i), &r)
	}
	neg := settled(0, 0, -5)
	sh.Put(keyDigest("ns", 0), &neg)
	mustFlush(t, sh)

	if n := sh.Purge(0, 10); n != 1 {
		t.Fatalf("Purge(0) = %d, want 1 (the negative deadline)", n)
	}
	if n := sh.Purge(55, 3); n != 3 {
		t.Fatalf("Purge(55, 3) = %d, want 3", n)
	}
	for i := 1; i <= 3; i++ {
		mustMiss(t, sh, keyDigest("ns", i)) // earliest first
	}
	mustGet(t, sh, keyDigest("ns", 4), settled(4, 5, 40))
	if n := sh.Purge(55, 10); n != 2 {
		t.Fatalf("Purge(55, 10) = %d, want 2", n)
	}
	if n := sh.Purge(55, 10); n != 0 {
		t.Fatalf("Purge(55) again = %d, want 0", n)
	}
	// A record demoted with a deadline already passed is still purged.
	late := settled(20, 1, 30)
	sh.Put(keyDigest("ns", 20), &late)
	if n := sh.Purge(60, 10); n != 2 { // 30 (pending) and 60
		t.Fatalf("Purge(60) = %d, want 2", n)
	}
	mustFlush(t, sh)
	if n := sh.Purge(1<<62, 100); n != 4 {
		t.Fatalf("final Purge = %d, want 4", n)
	}
	mustFlush(t, sh)
	if n := rawKeys(t, s, 2); len(n) != 0 {
		t.Fatalf("keys left after purging everything: %v", n)
	}
	st := sh.Stats()
	if st.Keys != 0 || st.Bytes != 0 || st.Purged != 12 {
		t.Fatalf("stats = %+v", st)
	}
	if n := sh.Purge(1<<62, 0); n != 0 {
		t.Fatal("Purge with limit 0 removed records")
	}
}

func TestWipeDropsPendingAndFlushed(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(4)
	for i := range 5 {
		r := settled(i, 1, 100)
		sh.Put(keyDigest("ns", i), &r)
		if i == 2 {
			mustFlush(t, sh)
		}
	}
	if err := sh.Wipe(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		mustMiss(t, sh, keyDigest("ns", i))
	}
	mustFlush(t, sh)
	if n := rawKeys(t, s, 4); len(n) != 0 {
		t.Fatalf("keys left after Wipe: %v", n)
	}
	if st := sh.Stats(); st.Keys != 0 || st.Bytes != 0 {
		t.Fatalf("stats after Wipe = %+v", st)
	}
}

func TestClosedStore(t *testing.T) {
	s, err := Open("cold", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	sh := s.Shard(1)
	r := settled(1, 1, 2)
	sh.Put(keyDigest("ns", 1), &r)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := sh.Lookup(keyDigest("ns", 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Lookup after Close: %v", err)
	}
	if err := sh.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
	if err := s.Health(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Health after Close: %v", err)
	}
	if _, err := sh.Snapshot().WriteTo(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("snapshot after Close: %v", err)
	}
	defer func() {
		if p := recover(); p == nil {
			t.Fatal("Get after Close did not panic")
		}
	}()
	sh.Get(keyDigest("ns", 1))
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{CacheSize: -1}, {MemTableSize: 1}} {
		if _, err := Open(t.TempDir(), o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Open(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// The interface contract: the Machine may rely on Get seeing a Put of the
// same Apply, which the pending-batch test covers; this checks a record
// read back keeps every field the Machine reads.
func TestColdRecordFields(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(9)
	d := keyDigest("ns", 1)
	r := keyspace.ColdRecord{
		Record:      keyspace.Record{Token: 1<<40 | 3, Deadline: 1 << 45, Meta: meta(keyspace.Poisoned, flagFingerprint, 5, 1<<44)},
		Fingerprint: 42,
	}
	sh.Put(d, &r)
	mustFlush(t, sh)
	got, _ := sh.Get(d)
	if !sameRecord(got, r) || got.State() != keyspace.Poisoned || got.CompletedAt() != 1<<44 || !got.HasFingerprint() || got.Attempts() != 5 || got.Result != nil {
		t.Fatalf("got %+v", got)
	}
}

// A Put over a held digest breaks the ColdTier contract; the shard still
// neither purges the new record at the old deadline nor audits it at the
// old completed-at time.
func TestPutOverHeldDigestLeavesNoWrongIndex(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(1)
	d := keyDigest("ns", 1)
	old, cur := settled(1, 100, 1000), settled(1, 200, 5000)
	sh.Put(d, &old)
	sh.Put(d, &cur)
	mustFlush(t, sh)
	if n := sh.Purge(1000, 10); n != 0 {
		t.Fatalf("Purge at the old deadline removed %d", n)
	}
	mustGet(t, sh, d, cur)
	var times []int64
	err := s.Audit(d.NamespaceTag(), 0, 1<<40, func(_ uint32, _ digest.Digest, r keyspace.ColdRecord) bool {
		times = append(times, r.CompletedAt())
		return true
	})
	if err != nil || len(times) != 1 || times[0] != 200 {
		t.Fatalf("audit = %v, %v; want the record once, at 200", times, err)
	}
	if n := sh.Purge(5000, 10); n != 1 {
		t.Fatalf("Purge at the new deadline = %d, want 1", n)
	}
}

// On a real filesystem: the ballast is reserved, and records flushed to
// sstables survive a reopen (a crash would lose the memtable, which the
// shard rebuilds from Raft).
func TestOnDisk(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Logger: testOptions().Logger}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := fill(t, s.Shard(1), 0, 100)
	if err := s.db.With(func(db *pebble.DB) error { return db.Flush() }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ballastName)); err != nil {
		t.Errorf("no ballast: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s2, err := Open(dir, opts)
	if err == nil {
		s2.Close()
		t.Fatal("a second Open of a locked directory succeeded")
	}
	for d, r := range want {
		mustGet(t, s.Shard(1), d, r)
	}
}
