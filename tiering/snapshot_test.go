package tiering

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"sync"
	"testing"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

// fill puts n records (i in [from, from+n)) into sh and flushes.
func fill(t testing.TB, sh *Shard, from, n int) map[digest.Digest]keyspace.ColdRecord {
	t.Helper()
	want := make(map[digest.Digest]keyspace.ColdRecord, n)
	for i := from; i < from+n; i++ {
		r := settled(i, int64(1000+i), int64(5000+i))
		d := keyDigest("ns", i)
		sh.Put(d, &r)
		want[d] = r
	}
	mustFlush(t, sh)
	return want
}

func checkHolds(t testing.TB, sh *Shard, want map[digest.Digest]keyspace.ColdRecord) {
	t.Helper()
	for d, r := range want {
		mustGet(t, sh, d, r)
	}
	if st := sh.Stats(); st.Keys != int64(len(want)) {
		t.Fatalf("Keys = %d, want %d", st.Keys, len(want))
	}
}

func TestSnapshotRestoreIntoAnotherStore(t *testing.T) {
	a := openTest(t, testOptions())
	src := a.Shard(3)
	want := fill(t, src, 0, 3000)
	stream := dump(t, src)

	b := openTest(t, testOptions())
	dst := b.Shard(3)
	old := fill(t, dst, 10000, 10) // replaced by the restore
	if err := dst.Restore(bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	checkHolds(t, dst, want)
	for d := range old {
		mustMiss(t, dst, d)
	}
	if sa, sb := src.Stats(), dst.Stats(); sa.Bytes != sb.Bytes {
		t.Fatalf("Bytes: source %d, restored %d", sa.Bytes, sb.Bytes)
	}
	if !bytes.Equal(dump(t, dst), stream) {
		t.Fatal("a restored shard streams a different snapshot")
	}
	kinds := rawKeys(t, b, 3)
	if kinds[kindRecord] != 3000 || kinds[kindExpiry] != 3000 || kinds[kindAudit] != 3000 {
		t.Fatalf("keys by kind after restore = %v (old generation left?)", kinds)
	}
	// The rebuilt purge index works.
	if n := dst.Purge(5000+99, 1<<20); n != 100 {
		t.Fatalf("Purge after restore = %d, want 100", n)
	}
}

func TestRestoreTwiceAndEmpty(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(5)
	want := fill(t, sh, 0, 50)
	stream := dump(t, sh)
	for range 3 { // alternates generations
		if err := sh.Restore(bytes.NewReader(stream)); err != nil {
			t.Fatal(err)
		}
		checkHolds(t, sh, want)
	}
	empty := dump(t, openTest(t, testOptions()).Shard(5))
	if err := sh.Restore(bytes.NewReader(empty)); err != nil {
		t.Fatal(err)
	}
	checkHolds(t, sh, nil)
	if n := rawKeys(t, s, 5); len(n) != 0 {
		t.Fatalf("keys left after restoring an empty snapshot: %v", n)
	}
}

func TestSnapshotSeesOnlyOldState(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(1)
	before := fill(t, sh, 0, 100)
	ss := sh.Snapshot()
	defer ss.Close()
	// The shard goes on: deletes, purges and new records after the snapshot.
	sh.Delete(keyDigest("ns", 0))
	fill(t, sh, 100, 100)
	if n := sh.Purge(5000+10, 1000); n != 10 {
		t.Fatalf("Purge = %d, want 10", n)
	}
	mustFlush(t, sh)

	var buf bytes.Buffer
	if _, err := ss.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	other := openTest(t, testOptions()).Shard(1)
	if err := other.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	checkHolds(t, other, before)
}

func TestRestoreRefusesCorruptInput(t *testing.T) {
	s := openTest(t, testOptions())
	src := s.Shard(1)
	fill(t, src, 0, 20)
	stream := dump(t, src)

	dst := s.Shard(2)
	kept := fill(t, dst, 500, 5)
	bad := func(name string, b []byte) {
		t.Helper()
		err := dst.Restore(bytes.NewReader(b))
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("%s: Restore = %v, want ErrCorruptSnapshot", name, err)
		}
		checkHolds(t, dst, kept)
	}
	for _, cut := range []int{0, 5, 8, 12, len(stream) / 2, len(stream) - 13, len(stream) - 4, len(stream) - 1} {
		bad("truncated", stream[:cut])
	}
	for _, at := range []int{0, 9, 30, len(stream) / 2, len(stream) - 9, len(stream) - 2} {
		b := bytes.Clone(stream)
		b[at] ^= 0x40
		bad("flipped", b)
	}
	if n := rawKeys(t, s, 2); n[kindRecord] != 5 || n[kindAudit] != 5 {
		t.Fatalf("keys by kind after refused restores = %v", n)
	}
}

// Readers may run beside the writer (race detector), and never see a
// record other than the one written for its digest.
func TestConcurrentLookups(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(1)
	const n = 400
	var wg sync.WaitGroup
	done := make(chan struct{})
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := r; ; i = (i + 7) % n {
				select {
				case <-done:
					return
				default:
				}
				got, ok, err := sh.Lookup(keyDigest("ns", i))
				if err != nil {
					t.Error(err)
					return
				}
				if want := settled(i, 1, 1<<40); ok && !sameRecord(got, want) {
					t.Errorf("record %d = %+v, want %+v", i, got, want)
					return
				}
				_ = sh.Stats()
			}
		}()
	}
	for i := range n {
		r := settled(i, 1, 1<<40)
		sh.Put(keyDigest("ns", i), &r)
		if i%3 == 0 {
			sh.Delete(keyDigest("ns", i-i%9))
		}
		if i%10 == 0 {
			mustFlush(t, sh)
		}
		if i%100 == 0 {
			ss := sh.Snapshot()
			if _, err := ss.WriteTo(&bytes.Buffer{}); err != nil {
				t.Error(err)
			}
			ss.Close()
		}
	}
	close(done)
	wg.Wait()
}

// withCRC replaces the trailing CRC-32C of a stream with the right one.
func withCRC(b []byte) []byte {
	b = bytes.Clone(b)
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	return b
}

// Streams with a valid checksum but inconsistent content: the index
// entries must be those the records imply, in order, as many as counted.
func TestRestoreRefusesInconsistentStreams(t *testing.T) {
	s := openTest(t, testOptions())
	src := s.Shard(1)
	fill(t, src, 0, 4)
	stream := dump(t, src)
	// Entry offsets: 4 'a' entries of 1+26 bytes follow the magic.
	const firstA, aLen = 8, 1 + auditKeyLen - prefixLen
	rec := firstA + 4*aLen // first 'r' entry
	dst := s.Shard(2)
	kept := fill(t, dst, 100, 3)
	cases := map[string][]byte{}
	b := bytes.Clone(stream)
	b[firstA+4*aLen-1] ^= 1 // digest of the last audit entry
	cases["audit entry changed"] = withCRC(b)
	b = bytes.Clone(stream)
	copy(b[firstA+aLen:], b[firstA:firstA+aLen]) // duplicate entry
	cases["entries out of order"] = withCRC(b)
	b = bytes.Clone(stream)
	b[rec+1+16+4+8+7] ^= 1 // deadline of a record: its purge entry no longer matches
	cases["record deadline changed"] = withCRC(b)
	b = bytes.Clone(stream)
	b[len(b)-5] ^= 1 // record count
	cases["count changed"] = withCRC(b)
	b = bytes.Clone(stream)
	b[firstA] = 'q'
	cases["unknown kind"] = withCRC(b)
	b = append(bytes.Clone(stream[:firstA]), stream[firstA+aLen:]...)
	cases["audit entry missing"] = withCRC(b)
	for name, in := range cases {
		if err := dst.Restore(bytes.NewReader(in)); !errors.Is(err, ErrCorruptSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrCorruptSnapshot", name, err)
		}
		checkHolds(t, dst, kept)
	}
	if err := dst.Restore(bytes.NewReader(withCRC(stream))); err != nil {
		t.Fatalf("the untouched stream: %v", err)
	}
}
