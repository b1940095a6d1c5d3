package tiering

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

const filesDir = "snapshots/cold/group-3"

// persist writes a snapshot of sh with its local files under filesDir/id
// and returns the stream.
func persist(t testing.TB, sh *Shard, id string) []byte {
	t.Helper()
	ss := sh.Snapshot()
	defer ss.Close()
	var buf bytes.Buffer
	if _, err := ss.WriteWithFiles(&buf, filesDir, id); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// headerLen is the length of a stream's magic and files reference.
func headerLen(id string) int { return 8 + 1 + len(id) + 16 }

// onlyHeader is a reader that serves the header of stream and fails any
// read beyond it.
type onlyHeader struct {
	r *bytes.Reader
}

var errReadPastHeader = errors.New("read past the files reference")

func (o *onlyHeader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	if err == io.EOF {
		return n, errReadPastHeader
	}
	return n, err
}

func auditCount(t testing.TB, s *Store, shard uint32) int {
	t.Helper()
	n := 0
	err := s.Audit(digest.NamespaceTag("ns"), -1<<62, 1<<62, func(id uint32, d digest.Digest, r keyspace.ColdRecord) bool {
		if id == shard {
			n++
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A shard restored from its own snapshot files holds what the stream
// holds, index entries included, without reading the stream past its
// reference, and the files stay for the next restore.
func TestRestoreWithFilesIngestsLocalCopies(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(3)
	want := fill(t, sh, 0, 3000)
	const id = "2-3000-1764000000000"
	stream := persist(t, sh, id)
	plain := dump(t, sh)
	bytesBefore := sh.Stats().Bytes
	change := func() { // after the snapshot: replaced by a restore
		fill(t, sh, 5000, 10)
		sh.Delete(keyDigest("ns", 7))
		mustFlush(t, sh)
	}
	check := func(step string, files, streams uint64) {
		t.Helper()
		st := sh.Stats()
		if st.FileRestores != files || st.StreamRestores != streams {
			t.Fatalf("%s: restores from files %d, from the stream %d; want %d, %d",
				step, st.FileRestores, st.StreamRestores, files, streams)
		}
		checkHolds(t, sh, want)
		if st.Bytes != bytesBefore {
			t.Fatalf("%s: Bytes = %d, want %d", step, st.Bytes, bytesBefore)
		}
		if got := dump(t, sh); !bytes.Equal(got, plain) {
			t.Fatalf("%s: the restored shard streams a different snapshot", step)
		}
		kinds := rawKeys(t, s, 3)
		if kinds[kindRecord] != 3000 || kinds[kindExpiry] != 3000 || kinds[kindAudit] != 3000 {
			t.Fatalf("%s: keys by kind = %v (old generation left?)", step, kinds)
		}
		if n := auditCount(t, s, 3); n != 3000 {
			t.Fatalf("%s: audit lists %d records, want 3000", step, n)
		}
	}
	fromHeader := func() io.Reader { return &onlyHeader{bytes.NewReader(stream[:headerLen(id)])} }

	// Generation 0 is live: the files (generation 1) go in beside it.
	change()
	if err := sh.RestoreWithFiles(fromHeader(), filesDir); err != nil {
		t.Fatal(err)
	}
	check("over generation 0", 1, 0)

	// Generation 1 is live and holds records: ingesting over them is
	// refused, and the stream is read instead.
	change()
	if err := sh.RestoreWithFiles(fromHeader(), filesDir); !errors.Is(err, errReadPastHeader) {
		t.Fatalf("restore over the files' own live generation = %v, want the stream read", err)
	}
	if err := sh.RestoreWithFiles(bytes.NewReader(stream), filesDir); err != nil {
		t.Fatal(err)
	}
	check("over generation 1", 1, 1)

	// As at a node's start, twice from the same files: wiped first.
	for round := range 2 {
		change()
		if err := sh.Wipe(); err != nil {
			t.Fatal(err)
		}
		if err := sh.RestoreWithFiles(fromHeader(), filesDir); err != nil {
			t.Fatalf("after wipe %d: %v", round, err)
		}
		check("after a wipe", uint64(2+round), 1)
	}
	// The purge index works on the ingested records.
	if n := sh.Purge(5000+99, 1<<20); n != 100 {
		t.Fatalf("Purge after restore = %d, want 100", n)
	}
}

// Files that are missing, damaged, or of another snapshot send the
// restore to the stream, which restores the same records.
func TestRestoreWithFilesFallsBackToTheStream(t *testing.T) {
	fs := vfs.NewMem()
	opts := testOptions()
	opts.FS = fs
	s := openTest(t, opts)
	sh := s.Shard(3)
	want := fill(t, sh, 0, 500)
	const id = "1-500-1"
	dir := fs.PathJoin(filesDir, id)
	table := fs.PathJoin(dir, tableName(0))
	cases := []struct {
		name   string
		damage func(t *testing.T)
	}{
		{"directory missing", func(t *testing.T) { must(fs.RemoveAll(dir)) }},
		{"manifest missing", func(t *testing.T) { must(fs.Remove(fs.PathJoin(dir, filesManifestName))) }},
		{"manifest damaged", func(t *testing.T) { flipByte(t, fs, fs.PathJoin(dir, filesManifestName), 20) }},
		{"table damaged", func(t *testing.T) { flipByte(t, fs, table, 100) }},
		{"table truncated", func(t *testing.T) {
			b := readAll(t, fs, table)
			writeAll(t, fs, table, b[:len(b)-10])
		}},
		{"table missing", func(t *testing.T) { must(fs.Remove(table)) }},
		{"files of another snapshot", func(t *testing.T) { persist(t, sh, id) }},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stream := persist(t, sh, id)
			c.damage(t)
			if err := sh.Wipe(); err != nil {
				t.Fatal(err)
			}
			if err := sh.RestoreWithFiles(bytes.NewReader(stream), filesDir); err != nil {
				t.Fatal(err)
			}
			if st := sh.Stats(); st.FileRestores != 0 || st.StreamRestores != uint64(i+1) {
				t.Fatalf("restores from files %d, from the stream %d", st.FileRestores, st.StreamRestores)
			}
			checkHolds(t, sh, want)
			if n := auditCount(t, s, 3); n != 500 {
				t.Fatalf("audit lists %d records, want 500", n)
			}
		})
	}
	// A plain Restore ignores the files.
	stream := persist(t, sh, id)
	if err := sh.Restore(bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if st := sh.Stats(); st.FileRestores != 0 {
		t.Fatalf("Restore used the files")
	}
	checkHolds(t, sh, want)
}

// Files that cannot be written leave a complete stream, which a restore
// reads.
func TestWriteWithFilesSurvivesUnwritableFiles(t *testing.T) {
	fs := vfs.NewMem()
	opts := testOptions()
	opts.FS = fs
	s := openTest(t, opts)
	sh := s.Shard(3)
	want := fill(t, sh, 0, 100)
	must(fs.MkdirAll("snapshots/cold", 0o755))
	writeAll(t, fs, filesDir, []byte("a file where the directory should be"))
	stream := persist(t, sh, "1-1-1")
	if err := sh.Wipe(); err != nil {
		t.Fatal(err)
	}
	if err := sh.RestoreWithFiles(bytes.NewReader(stream), filesDir); err != nil {
		t.Fatal(err)
	}
	if st := sh.Stats(); st.StreamRestores != 1 {
		t.Fatalf("restores from the stream: %d, want 1", st.StreamRestores)
	}
	checkHolds(t, sh, want)
}

func TestWriteWithFilesRefusesBadIDs(t *testing.T) {
	s := openTest(t, testOptions())
	sh := s.Shard(3)
	for _, id := range []string{"", ".", "..", "../x", "a/b", string(make([]byte, 256))} {
		ss := sh.Snapshot()
		if _, err := ss.WriteWithFiles(io.Discard, filesDir, id); err == nil {
			t.Errorf("WriteWithFiles accepted id %q", id)
		}
		ss.Close()
	}
}

func flipByte(t *testing.T, fs vfs.FS, path string, at int) {
	t.Helper()
	b := readAll(t, fs, path)
	b[at] ^= 0x40
	writeAll(t, fs, path, b)
}

func readAll(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeAll(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
