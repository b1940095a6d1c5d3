package tiering

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// benchShard returns a shard of benchRecords records on disk.
func benchShard(b *testing.B) (*Store, *Shard, int) {
	n := benchRecords(b)
	s, err := Open(filepath.Join(b.TempDir(), "cold"), Options{Logger: testOptions().Logger})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	sh := s.Shard(1)
	for i := range n {
		r := settled(i, int64(1000+i), int64(1<<40+i))
		sh.Put(keyDigest("ns", i), &r)
		if i%1000 == 999 {
			mustFlush(b, sh)
		}
	}
	mustFlush(b, sh)
	return s, sh, n
}

// BenchmarkSnapshotWrite measures a snapshot's stream alone (WriteTo, the
// cost before snapshot files) and with its local files (WriteWithFiles,
// what Persist now does).
func BenchmarkSnapshotWrite(b *testing.B) {
	_, sh, n := benchShard(b)
	dir := filepath.Join(b.TempDir(), "files")
	for _, files := range []bool{false, true} {
		name := "stream"
		if files {
			name = "stream+files"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				ss := sh.Snapshot()
				var err error
				if files {
					_, err = ss.WriteWithFiles(io.Discard, dir, "1-1-1")
				} else {
					_, err = ss.WriteTo(io.Discard)
				}
				ss.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
			if files {
				b.ReportMetric(float64(dirSize(b, filepath.Join(dir, "1-1-1")))/float64(n), "files-B/record")
			}
		})
	}
}

func dirSize(b *testing.B, dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			b.Fatal(err)
		}
		n += info.Size()
	}
	return n
}

// BenchmarkRestoreWithFiles measures a restore from local snapshot files
// (compare BenchmarkRestore, from the stream), into a wiped shard as at a
// node's start.
func BenchmarkRestoreWithFiles(b *testing.B) {
	_, sh, n := benchShard(b)
	dir := filepath.Join(b.TempDir(), "files")
	ss := sh.Snapshot()
	var stream bytes.Buffer
	if _, err := ss.WriteWithFiles(&stream, dir, "1-1-1"); err != nil {
		b.Fatal(err)
	}
	ss.Close()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if err := sh.Wipe(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := sh.RestoreWithFiles(bytes.NewReader(stream.Bytes()), dir); err != nil {
			b.Fatal(err)
		}
	}
	if st := sh.Stats(); st.FileRestores != uint64(b.N) {
		b.Fatalf("%d restores from files, want %d", st.FileRestores, b.N)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
