package tiering

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/l4xg/grid/digest"
)

// benchRecords is the number of records BenchmarkColdGet loads (1M unless
// TIERING_BENCH_RECORDS says otherwise).
func benchRecords(b *testing.B) int {
	if v := os.Getenv("TIERING_BENCH_RECORDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	return 1_000_000
}

// BenchmarkColdGet loads one shard with benchRecords records on disk
// (flushed and compacted, so no lookup is served from a memtable), then
// measures Get of digests the tier holds (Hit) and does not hold (Miss).
// Besides ns/op it reports the block cache misses per lookup (data read
// from the files, so from disk or the OS page cache) and bloom filter
// hits per lookup (blocks a filter spared), and the p99 bucket of the
// shard's lookup latency histogram.
func BenchmarkColdGet(b *testing.B) {
	n := benchRecords(b)
	s, err := Open(b.TempDir(), Options{Logger: testOptions().Logger})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sh := s.Shard(1)
	start := time.Now()
	for i := range n {
		r := settled(i, int64(1000+i), int64(1<<40+i))
		sh.Put(keyDigest("ns", i), &r)
		if i%1000 == 999 {
			mustFlush(b, sh)
		}
	}
	mustFlush(b, sh)
	if err := s.db.With(func(db *pebble.DB) error {
		if err := db.Flush(); err != nil {
			return err
		}
		return db.Compact(b.Context(), []byte{0}, []byte{0xff}, true)
	}); err != nil {
		b.Fatal(err)
	}
	st, _ := s.Stats()
	b.Logf("loaded %d records in %v; %d bytes on disk (%.1f B/record)", n, time.Since(start).Round(time.Millisecond), st.DiskBytes, float64(st.DiskBytes)/float64(n))

	hits := make([]digest.Digest, 1<<16)
	misses := make([]digest.Digest, 1<<16)
	for i := range hits {
		hits[i] = keyDigest("ns", rand.IntN(n))
		misses[i] = keyDigest("other", i)
	}
	run := func(name string, ds []digest.Digest, want bool) {
		b.Run(name, func(b *testing.B) {
			before, _ := s.Metrics()
			lat0 := sh.Stats().LookupLatency
			b.ResetTimer()
			for i := range b.N {
				if _, ok := sh.Get(ds[i&(len(ds)-1)]); ok != want {
					b.Fatalf("Get found=%v, want %v", ok, want)
				}
			}
			b.StopTimer()
			after, _ := s.Metrics()
			b.ReportMetric(float64(after.BlockCache.Misses-before.BlockCache.Misses)/float64(b.N), "cachemiss/op")
			b.ReportMetric(float64(after.Filter.Hits-before.Filter.Hits)/float64(b.N), "filterhit/op")
			b.ReportMetric(float64(p99(lat0, sh.Stats().LookupLatency).Microseconds()), "p99-us")
		})
	}
	run("Miss", misses, false)
	run("Hit", hits, true)
	// For comparison: Pebble's Get, which skips the L6 bloom filters.
	b.Run("MissWithDBGet", func(b *testing.B) {
		before, _ := s.Metrics()
		var k [recordKeyLen]byte
		err := s.db.With(func(db *pebble.DB) error {
			for i := range b.N {
				_, _, err := db.Get(recordKey(&k, 1, sh.gen, misses[i&(len(misses)-1)]))
				if !errors.Is(err, pebble.ErrNotFound) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		after, _ := s.Metrics()
		b.ReportMetric(float64(after.BlockCache.Misses-before.BlockCache.Misses)/float64(b.N), "cachemiss/op")
	})
}

// p99 returns the upper bound of the bucket holding the 99th percentile of
// the observations made between two histogram readings.
func p99(before, after Histogram) time.Duration {
	var total uint64
	counts := make([]uint64, len(after.Counts))
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
	}
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen*100 >= total*99 {
			if i < len(after.Bounds) {
				return after.Bounds[i]
			}
			break
		}
	}
	return time.Duration(1<<63 - 1)
}

// BenchmarkRestore measures Restore of a shard of benchRecords records,
// which shard start runs on the cold part of a Raft snapshot.
func BenchmarkRestore(b *testing.B) {
	n := benchRecords(b)
	s, err := Open(b.TempDir(), Options{Logger: testOptions().Logger})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	src := s.Shard(1)
	for i := range n {
		r := settled(i, int64(1000+i), int64(1<<40+i))
		src.Put(keyDigest("ns", i), &r)
		if i%1000 == 999 {
			mustFlush(b, src)
		}
	}
	stream := dump(b, src)
	b.SetBytes(int64(len(stream)))
	dst := s.Shard(2)
	b.ResetTimer()
	for range b.N {
		if err := dst.Restore(bytes.NewReader(stream)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
