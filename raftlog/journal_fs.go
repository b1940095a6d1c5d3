package raftlog

import (
	"io"
	"os"

	"github.com/l4xg/grid/internal/dirlock"
	"github.com/l4xg/grid/internal/dirsync"
)

// journalFS is what a Journal asks of the file system: the real one in
// production (osFS); tests put one in its place that fails chosen calls,
// runs out of space or loses what was not synced, to show what the
// journal does then.
type journalFS interface {
	// Lock takes the exclusive lock of dir for this process, or fails
	// naming the process that holds it.
	Lock(dir string) (io.Closer, error)
	MkdirAll(dir string) error
	// List returns the names in dir.
	List(dir string) ([]string, error)
	// Create creates (or truncates) the file name, for reading and
	// writing.
	Create(name string) (journalFile, error)
	// Open opens the existing file name for reading and writing.
	Open(name string) (journalFile, error)
	Rename(from, to string) error
	Remove(name string) error
	// SyncDir makes the changes to dir's entries durable.
	SyncDir(dir string) error
}

// journalFile is an open segment.
type journalFile interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Preallocate reserves size bytes for the file and sets its size to
	// size, so that writing into them changes no file size.
	Preallocate(size int64) error
	// SyncData makes the file's data durable (fdatasync).
	SyncData() error
	// Size returns the file's size.
	Size() (int64, error)
}

// osFS is the real file system.
type osFS struct{}

var _ journalFS = osFS{}

func (osFS) Lock(dir string) (io.Closer, error) { return dirlock.Acquire(dir) }

// MkdirAll creates dir durably (dirsync.MkdirAll).
func (osFS) MkdirAll(dir string) error { return dirsync.MkdirAll(dir, 0o755) }

func (osFS) List(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(des))
	for i, de := range des {
		names[i] = de.Name()
	}
	return names, nil
}

func (osFS) Create(name string) (journalFile, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Open(name string) (journalFile, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Rename(from, to string) error { return os.Rename(from, to) }
func (osFS) Remove(name string) error     { return os.Remove(name) }
func (osFS) SyncDir(dir string) error     { return dirsync.Sync(dir) }

type osFile struct{ *os.File }

func (f osFile) Preallocate(size int64) error { return preallocate(f.File, size) }
func (f osFile) SyncData() error              { return fdatasync(f.File) }

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
