package tiering

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Local snapshot files: WriteWithFiles keeps, beside the stream, the
// shard's records of the snapshot as sstables in <dir>/<id>/, ready to be
// ingested, so that a node restarting from its own snapshot links them into
// the database (O(files)) instead of rewriting every record from the
// stream. The directory holds 000000.sst, 000001.sst, ... and, written
// last, a manifest (integers big-endian):
//
//	magic "L4XGCLF1"
//	shard u32, gen u8 (the generation the keys carry), nonce [16]byte
//	records u64, logical bytes u64
//	files u32, then for each: size u64, CRC-32C u32 of its bytes
//	CRC-32C u32 of every byte before it
//
// The files are fsynced before the manifest is written to a temporary name,
// fsynced and renamed into place, and the directory fsynced: a directory
// with a manifest is complete. Restore checks the manifest against the
// stream's reference (the nonce), then every file's size and checksum,
// before it ingests anything; any mismatch sends it back to the stream.
var filesManifestMagic = [8]byte{'L', '4', 'X', 'G', 'C', 'L', 'F', '1'}

const (
	filesManifestName = "MANIFEST"
	// filesGen is the generation the keys of snapshot files carry: the one
	// a restore into a wiped shard (generation 0) loads into.
	filesGen = 1
)

// ErrNoSnapshotFiles means a snapshot has no usable local files: the
// directory or its manifest is missing, or belongs to another snapshot.
var ErrNoSnapshotFiles = errors.New("tiering: no local snapshot files")

// validFilesID reports whether id can name a snapshot's directory: 1 to
// 255 bytes of letters, digits, '-', '_' and '.', not starting with '.'.
func validFilesID(id string) bool {
	if len(id) == 0 || len(id) > 255 || id[0] == '.' {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// WriteWithFiles streams the snapshot to w as WriteTo does, with a
// reference to id, and in the same scan writes its records as sstables
// into dir/id (replacing what was there). Restoring the stream with
// RestoreWithFiles(r, dir) on this node then ingests those files instead of
// reading the records from the stream.
//
// The files are an optimization: when they cannot be written (a full disk,
// say), they are removed, the failure is logged and the stream goes on,
// complete; a restore then reads it. The caller removes the files of
// snapshots it no longer keeps (PruneSnapshotFiles), including the files
// of a stream it abandons.
func (ss *ShardSnapshot) WriteWithFiles(w io.Writer, dir, id string) (int64, error) {
	if !validFilesID(id) {
		return 0, fmt.Errorf("tiering: snapshot files: invalid id %q", id)
	}
	ref := &filesRef{id: id}
	if _, err := rand.Read(ref.nonce[:]); err != nil {
		return 0, fmt.Errorf("tiering: snapshot files: nonce: %w", err)
	}
	fw := newFilesWriter(ss.store, ss.shard, ss.store.opts.FS.PathJoin(dir, id), ref.nonce)
	n, err := ss.write(w, ref, fw)
	if err != nil {
		fw.abort()
		return n, err
	}
	if err := fw.finish(); err != nil {
		ss.store.log.Warn("cannot keep local snapshot files; a restart will read the stream",
			"shard", ss.shard, "snapshot", id, "err", err)
	}
	return n, nil
}

// filesWriter writes a snapshot's keys, rewritten to generation filesGen,
// into checksummed sstables of one directory. Building sstables (blocks,
// compression, bloom filters) costs about twice the scan and the stream, so
// it runs on a goroutine of its own, fed batches of entries by add. Its
// first failure is kept and turns later entries into no-ops; a nil
// *filesWriter does nothing.
type filesWriter struct {
	s     *Store
	fs    vfs.FS
	dir   string
	shard uint32
	nonce [16]byte

	// The scanning goroutine's side.
	cur   *kvBatch
	queue chan *kvBatch // nil once closed
	free  chan *kvBatch
	done  chan struct{} // closed when build returns

	// The builder's side, read by the scanning goroutine after done.
	w     *sstable.Writer
	f     *summingFile
	files []fileSum
	keys  uint64 // records
	size  int64  // their logical bytes
	err   error
}

// kvBatch is a run of entries: keys and values back to back in buf, their
// lengths in lens (key, value, key, value...).
type kvBatch struct {
	buf  []byte
	lens []uint32
}

const (
	filesBatchBytes = 256 << 10
	filesBatches    = 6 // in flight: one filling, one building, the rest queued
)

type fileSum struct {
	size int64
	crc  uint32
}

func newFilesWriter(s *Store, shard uint32, dir string, nonce [16]byte) *filesWriter {
	fw := &filesWriter{s: s, fs: s.opts.FS, dir: dir, shard: shard, nonce: nonce,
		queue: make(chan *kvBatch, filesBatches-2), free: make(chan *kvBatch, filesBatches), done: make(chan struct{})}
	if err := fw.fs.RemoveAll(dir); err != nil {
		fw.err = err
	} else if err := fw.fs.MkdirAll(dir, 0o755); err != nil {
		fw.err = err
	}
	for range filesBatches {
		fw.free <- &kvBatch{buf: make([]byte, 0, filesBatchBytes+64<<10)}
	}
	go fw.build(fw.queue)
	return fw
}

func tableName(i int) string { return fmt.Sprintf("%06d.sst", i) }

// add queues an entry; key is the stored key, whose generation it rewrites.
func (fw *filesWriter) add(key, value []byte) {
	if fw == nil {
		return
	}
	if fw.cur == nil {
		fw.cur = <-fw.free
	}
	b := fw.cur
	at := len(b.buf)
	b.buf = append(append(b.buf, key...), value...)
	b.buf[at+4] = filesGen
	b.lens = append(b.lens, uint32(len(key)), uint32(len(value)))
	if len(b.buf) >= filesBatchBytes {
		fw.queue <- b
		fw.cur = nil
	}
}

// wait hands over the last batch and waits for the builder to finish. It
// may be called more than once.
func (fw *filesWriter) wait() {
	if fw.queue == nil {
		return
	}
	if fw.cur != nil && len(fw.cur.lens) > 0 {
		fw.queue <- fw.cur
	}
	fw.cur = nil
	close(fw.queue)
	fw.queue = nil
	<-fw.done
}

// build writes the entries of queue into sstables.
func (fw *filesWriter) build(queue <-chan *kvBatch) {
	defer close(fw.done)
	for b := range queue {
		off := 0
		for i := 0; i < len(b.lens); i += 2 {
			k := b.buf[off : off+int(b.lens[i])]
			off += len(k)
			v := b.buf[off : off+int(b.lens[i+1])]
			off += len(v)
			fw.set(k, v)
		}
		b.buf, b.lens = b.buf[:0], b.lens[:0]
		fw.free <- b
	}
}

func (fw *filesWriter) set(key, value []byte) {
	if fw.err != nil {
		return
	}
	if fw.w == nil {
		f, err := fw.fs.Create(fw.fs.PathJoin(fw.dir, tableName(len(fw.files))), vfs.WriteCategoryUnspecified)
		if err != nil {
			fw.err = err
			return
		}
		fw.f = &summingFile{File: f}
		fw.w = sstable.NewWriter(objstorageprovider.NewFileWritable(fw.f), fw.s.writerOpts)
	}
	if err := fw.w.Set(key, value); err != nil {
		fw.err = err
		return
	}
	if key[prefixLen-1] == kindRecord {
		fw.keys++
		fw.size += recordBytes(len(value))
	}
	if fw.w.Raw().EstimatedSize() >= ingestFileSize {
		fw.closeFile()
	}
}

// closeFile finishes the current sstable; Pebble's writer fsyncs it.
func (fw *filesWriter) closeFile() {
	w := fw.w
	fw.w = nil
	if err := w.Close(); err != nil {
		fw.err = err
		return
	}
	fw.files = append(fw.files, fileSum{size: fw.f.n, crc: fw.f.crc})
}

// finish writes the manifest; on failure it removes the directory.
func (fw *filesWriter) finish() error {
	fw.wait()
	if fw.err == nil && fw.w != nil {
		fw.closeFile()
	}
	if fw.err == nil {
		fw.err = fw.writeManifest()
	}
	if fw.err != nil {
		fw.abort()
		return fmt.Errorf("%w: snapshot files in %s: %w", ErrStorage, fw.dir, fw.err)
	}
	return nil
}

func (fw *filesWriter) abort() {
	fw.wait()
	if fw.w != nil {
		_ = fw.w.Close()
		fw.w = nil
	}
	if err := fw.fs.RemoveAll(fw.dir); err != nil {
		fw.s.log.Warn("cannot remove snapshot files", "dir", fw.dir, "err", err)
	}
}

func (fw *filesWriter) writeManifest() error {
	m := manifest{shard: fw.shard, gen: filesGen, nonce: fw.nonce, keys: fw.keys, size: fw.size, files: fw.files}
	tmp := fw.fs.PathJoin(fw.dir, filesManifestName+".tmp")
	f, err := fw.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(m.encode())
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	if err := fw.fs.Rename(tmp, fw.fs.PathJoin(fw.dir, filesManifestName)); err != nil {
		return err
	}
	return syncDir(fw.fs, fw.dir)
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// summingFile sums the bytes written through it (Pebble's writable writes
// an sstable sequentially with Write). It sums p before writing it: a
// vfs.File may scramble p once written (MemFS does, in invariant builds).
// A short write fails the sstable, so the sum is never used then.
type summingFile struct {
	vfs.File
	n   int64
	crc uint32
}

func (f *summingFile) Write(p []byte) (int, error) {
	f.crc = crc32.Update(f.crc, castagnoli, p)
	f.n += int64(len(p))
	return f.File.Write(p)
}

type manifest struct {
	shard uint32
	gen   byte
	nonce [16]byte
	keys  uint64
	size  int64
	files []fileSum
}

func (m *manifest) encode() []byte {
	b := append([]byte(nil), filesManifestMagic[:]...)
	b = binary.BigEndian.AppendUint32(b, m.shard)
	b = append(b, m.gen)
	b = append(b, m.nonce[:]...)
	b = binary.BigEndian.AppendUint64(b, m.keys)
	b = binary.BigEndian.AppendUint64(b, uint64(m.size))
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.files)))
	for _, f := range m.files {
		b = binary.BigEndian.AppendUint64(b, uint64(f.size))
		b = binary.BigEndian.AppendUint32(b, f.crc)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

const manifestFixedLen = 8 + 4 + 1 + 16 + 8 + 8 + 4

func decodeManifest(b []byte) (manifest, error) {
	var m manifest
	if len(b) < manifestFixedLen+4 || [8]byte(b[:8]) != filesManifestMagic {
		return m, errors.New("manifest: bad magic or length")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return m, errors.New("manifest: checksum mismatch")
	}
	m.shard = binary.BigEndian.Uint32(body[8:])
	m.gen = body[12]
	copy(m.nonce[:], body[13:29])
	m.keys = binary.BigEndian.Uint64(body[29:])
	m.size = int64(binary.BigEndian.Uint64(body[37:]))
	n := binary.BigEndian.Uint32(body[45:])
	rest := body[manifestFixedLen:]
	if uint64(len(rest)) != uint64(n)*12 {
		return m, fmt.Errorf("manifest: %d bytes for %d files", len(rest), n)
	}
	for i := range int(n) {
		m.files = append(m.files, fileSum{
			size: int64(binary.BigEndian.Uint64(rest[12*i:])),
			crc:  binary.BigEndian.Uint32(rest[12*i+8:]),
		})
	}
	return m, nil
}

// readManifest reads and checks the manifest of dir against ref. A missing
// directory or manifest, or one of another snapshot, is ErrNoSnapshotFiles.
func readManifest(fs vfs.FS, dir string, ref *filesRef) (manifest, error) {
	f, err := fs.Open(fs.PathJoin(dir, filesManifestName))
	if errors.Is(err, os.ErrNotExist) {
		return manifest{}, ErrNoSnapshotFiles
	}
	if err != nil {
		return manifest{}, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<24))
	if err = errors.Join(err, f.Close()); err != nil {
		return manifest{}, err
	}
	m, err := decodeManifest(b)
	if err != nil {
		return m, err
	}
	if m.nonce != ref.nonce {
		return m, fmt.Errorf("%w: the files in %s belong to another snapshot", ErrNoSnapshotFiles, dir)
	}
	return m, nil
}

// verifyFiles checks every file's size and checksum against m.
func verifyFiles(fs vfs.FS, dir string, m *manifest) error {
	buf := make([]byte, 1<<20)
	for i, want := range m.files {
		path := fs.PathJoin(dir, tableName(i))
		f, err := fs.Open(path)
		if err != nil {
			return err
		}
		var crc uint32
		var n int64
		for {
			k, err := f.Read(buf)
			crc = crc32.Update(crc, castagnoli, buf[:k])
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
		if n != want.size || crc != want.crc {
			return fmt.Errorf("%s: %d bytes, checksum %08x; manifest says %d bytes, %08x", path, n, crc, want.size, want.crc)
		}
	}
	return nil
}

// restoreFilesLocked replaces the shard's records with the snapshot files
// of ref in dir: it checks them, ingests links to them (Pebble removes what
// it ingests, and the files must stay for the next restart) and switches
// to their generation. On error the shard keeps its records and the
// caller reads the stream instead. s.mu is held and the batch flushed.
func (s *Shard) restoreFilesLocked(dir string, ref *filesRef) error {
	fs := s.store.opts.FS
	sdir := fs.PathJoin(dir, ref.id)
	m, err := readManifest(fs, sdir, ref)
	if err != nil {
		return err
	}
	if m.shard != s.id {
		return fmt.Errorf("%w: the files in %s are of shard %d", ErrNoSnapshotFiles, sdir, m.shard)
	}
	t := m.gen
	empty := s.countExact.Load() && s.stats.keys.Load() == 0
	if t > 1 || t == s.gen && !empty {
		// Ingesting into the live generation would lose its records if
		// the ingestion failed.
		return fmt.Errorf("%w: the files are of generation %d, live", ErrNoSnapshotFiles, t)
	}
	if err := verifyFiles(fs, sdir, &m); err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
	}
	lo, hi := genBounds(s.id, t)
	if err := s.store.deleteRange(lo, hi); err != nil {
		return err
	}
	if err := s.store.ingestLinks(s.id, sdir, len(m.files)); err != nil {
		if t != s.gen {
			_ = s.store.deleteRange(lo, hi) // best effort, as in Restore
		}
		return err
	}
	old := s.gen
	s.gen = t
	s.purgeFloor = math.MinInt64
	s.stats.keys.Store(int64(m.keys))
	s.stats.bytes.Store(m.size)
	if old != t {
		lo, hi = genBounds(s.id, old)
		if err := s.store.deleteRange(lo, hi); err != nil {
			return fmt.Errorf("drop old records: %w", err)
		}
	}
	return nil
}

// ingestLinks ingests files 000000.sst ... of dir, leaving them in place:
// it links (or, across file systems, copies) them into the ingest
// directory and ingests the links, which Pebble links in turn and removes.
func (s *Store) ingestLinks(shard uint32, dir string, n int) error {
	if n == 0 {
		return nil
	}
	fs := s.opts.FS
	stage := fs.PathJoin(s.dir, ingestDir)
	if err := fs.MkdirAll(stage, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	paths := make([]string, n)
	defer func() {
		for _, p := range paths {
			if p == "" {
				continue
			}
			if err := fs.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.log.Warn("cannot remove restore file", "path", p, "err", err)
			}
		}
	}()
	for i := range n {
		p := fs.PathJoin(stage, fmt.Sprintf("shard-%d-files-%06d.sst", shard, i))
		if err := fs.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrStorage, err)
		}
		if err := vfs.LinkOrCopy(fs, fs.PathJoin(dir, tableName(i)), p); err != nil {
			return fmt.Errorf("%w: link %s: %w", ErrStorage, p, err)
		}
		paths[i] = p
	}
	return s.db.With(func(db *pebble.DB) error {
		if err := db.Ingest(context.Background(), paths); err != nil {
			return fmt.Errorf("%w: ingest: %w", ErrStorage, err)
		}
		return nil
	})
}

// header reads a stream's magic and, in the format that has one, its
// reference to local files (nil when none).
func (sr *snapReader) header() (*filesRef, error) {
	var magic [8]byte
	sr.Raw(magic[:])
	if sr.Err != nil {
		return nil, sr.Err
	}
	switch magic {
	case coldSnapshotMagic:
		return nil, nil
	case coldSnapshotMagicRefs:
	default:
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorruptSnapshot, magic[:])
	}
	var n [1]byte
	sr.Raw(n[:])
	id := make([]byte, n[0])
	sr.Raw(id)
	ref := &filesRef{id: string(id)}
	sr.Raw(ref.nonce[:])
	if sr.Err != nil {
		return nil, sr.Err
	}
	if !validFilesID(ref.id) {
		return nil, fmt.Errorf("%w: snapshot files id %q", ErrCorruptSnapshot, ref.id)
	}
	return ref, nil
}
