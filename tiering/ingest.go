package tiering

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ingestDir is the directory, inside the database's, where Restore writes
// the sstables it then ingests. Open removes what a crash left there.
const ingestDir = "ingest"

// ingestFileSize is the size at which the ingester starts a new sstable.
const ingestFileSize = 64 << 20

// ingester writes keys given in strictly ascending order into sstables and
// ingests them in one go: far cheaper than batches, which go through the
// memtable, a flush and compactions. The files do not overlap, and the key
// range they cover was just emptied, so Pebble places them low in the LSM.
type ingester struct {
	s     *Store
	shard uint32
	gen   byte
	w     *sstable.Writer
	paths []string
}

func (s *Store) newIngester(shard uint32, gen byte) *ingester {
	return &ingester{s: s, shard: shard, gen: gen}
}

func (iw *ingester) add(key, value []byte) error {
	if iw.w == nil {
		if err := iw.create(); err != nil {
			return err
		}
	}
	if err := iw.w.Set(key, value); err != nil {
		return fmt.Errorf("%w: write sstable: %w", ErrStorage, err)
	}
	if iw.w.Raw().EstimatedSize() >= ingestFileSize {
		return iw.closeFile()
	}
	return nil
}

func (iw *ingester) create() error {
	fs := iw.s.opts.FS
	dir := fs.PathJoin(iw.s.dir, ingestDir)
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	path := fs.PathJoin(dir, fmt.Sprintf("shard-%d-gen-%d-%06d.sst", iw.shard, iw.gen, len(iw.paths)))
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("%w: create %s: %w", ErrStorage, path, err)
	}
	iw.paths = append(iw.paths, path)
	iw.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), iw.s.writerOpts)
	return nil
}

func (iw *ingester) closeFile() error {
	w := iw.w
	iw.w = nil
	if err := w.Close(); err != nil {
		return fmt.Errorf("%w: finish sstable: %w", ErrStorage, err)
	}
	return nil
}

// finish ingests the files written.
func (iw *ingester) finish() error {
	if iw.w != nil {
		if err := iw.closeFile(); err != nil {
			return err
		}
	}
	if len(iw.paths) == 0 {
		return nil
	}
	err := iw.s.db.With(func(db *pebble.DB) error {
		if err := db.Ingest(context.Background(), iw.paths); err != nil {
			return fmt.Errorf("%w: ingest: %w", ErrStorage, err)
		}
		return nil
	})
	iw.removeFiles()
	return err
}

// abort drops what was written and not ingested; after finish it does
// nothing.
func (iw *ingester) abort() {
	if iw.w != nil {
		_ = iw.w.Close()
		iw.w = nil
	}
	iw.removeFiles()
}

func (iw *ingester) removeFiles() {
	for _, p := range iw.paths {
		if err := iw.s.opts.FS.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			iw.s.log.Warn("cannot remove restore file", "path", p, "err", err)
		}
	}
	iw.paths = nil
}
