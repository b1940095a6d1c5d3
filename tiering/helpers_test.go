package tiering

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

func testOptions() Options {
	return Options{FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)}
}

func openTest(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open("cold", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// meta builds Record.Meta by its documented layout (keyspace/record.go):
// bits 0-3 state, 4-7 flags, 8-15 attempts, 16-63 aux (completed-at).
func meta(st keyspace.State, flags, attempts uint8, aux int64) uint64 {
	return uint64(st)&0xf | uint64(flags&0xf)<<4 | uint64(attempts)<<8 | uint64(aux)<<16
}

const (
	flagFingerprint = 1 << 0
	flagResult      = 1 << 1
)

func keyDigest(ns string, i int) digest.Digest {
	return digest.Key(ns, fmt.Appendf(nil, "key-%d", i))
}

// settled returns a COMPLETED record completed at completedAt and kept
// until deadline; every third one carries a result, every other one a
// fingerprint.
func settled(i int, completedAt, deadline int64) keyspace.ColdRecord {
	var flags uint8
	r := keyspace.ColdRecord{}
	if i%2 == 0 {
		flags |= flagFingerprint
		r.Fingerprint = uint64(i) * 0x9e3779b97f4a7c15
	}
	if i%3 == 0 {
		flags |= flagResult
		r.Result = fmt.Appendf(nil, "result of %d", i)
	}
	r.Record = keyspace.Record{Token: uint64(i)<<16 | 1, Deadline: deadline, Meta: meta(keyspace.Completed, flags, 1, completedAt)}
	return r
}

func sameRecord(a, b keyspace.ColdRecord) bool {
	return a.Record == b.Record && a.Fingerprint == b.Fingerprint && bytes.Equal(a.Result, b.Result) &&
		(a.Result == nil) == (b.Result == nil)
}

func mustGet(t testing.TB, sh *Shard, d digest.Digest, want keyspace.ColdRecord) {
	t.Helper()
	got, ok := sh.Get(d)
	if !ok {
		t.Fatalf("Get(%v): missing, want %+v", d, want)
	}
	if !sameRecord(got, want) {
		t.Fatalf("Get(%v) = %+v, want %+v", d, got, want)
	}
}

func mustMiss(t testing.TB, sh *Shard, d digest.Digest) {
	t.Helper()
	if got, ok := sh.Get(d); ok {
		t.Fatalf("Get(%v) = %+v, want a miss", d, got)
	}
}

func mustFlush(t testing.TB, sh *Shard) {
	t.Helper()
	if err := sh.Flush(); err != nil {
		t.Fatal(err)
	}
}

// rawKeys counts the keys stored under every generation of shard id, by
// kind, in the database (flushed writes only).
func rawKeys(t testing.TB, s *Store, id uint32) map[byte]int {
	t.Helper()
	n := map[byte]int{}
	err := s.db.With(func(db *pebble.DB) error {
		lo, hi := shardBounds(id)
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			n[it.Key()[5]]++
		}
		return it.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// dump returns every record of a shard through its snapshot stream.
func dump(t testing.TB, sh *Shard) []byte {
	t.Helper()
	ss := sh.Snapshot()
	defer ss.Close()
	var buf bytes.Buffer
	if _, err := ss.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
