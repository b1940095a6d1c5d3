package dirsync

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data so that a crash at any moment leaves
// either the old file whole or the new one whole, and the new one survives
// a crash once WriteFile returns: data goes to a temporary file in the same
// directory, which is synced, closed and renamed over path; then the
// directory is synced, since until then the rename itself may be lost (a
// node would come back with the old file: an old key, an old setting). On
// an error the temporary file is removed; path is left as it was unless
// only the directory's sync failed, when path holds the new data but may
// lose it in a crash.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return writeFile(osFS{}, path, data, perm)
}

// fileSystem is what writeFile does to the disk, so that a test can see
// its steps in order.
type fileSystem interface {
	CreateTemp(dir, pattern string) (file, error)
	Rename(from, to string) error
	Remove(path string) error
	SyncDir(dir string) error
}

// file is a temporary file being written.
type file interface {
	Name() string
	Write(b []byte) (int, error)
	Chmod(mode os.FileMode) error
	Sync() error
	Close() error
}

func writeFile(fsys fileSystem, path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := fsys.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("dirsync: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			fsys.Remove(tmp)
			err = fmt.Errorf("dirsync: write %s: %w", path, err)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// osFS is the real disk.
type osFS struct{}

func (osFS) CreateTemp(dir, pattern string) (file, error) { return os.CreateTemp(dir, pattern) }
func (osFS) Rename(from, to string) error                 { return os.Rename(from, to) }
func (osFS) Remove(path string) error                     { return os.Remove(path) }
func (osFS) SyncDir(dir string) error                     { return Sync(dir) }
