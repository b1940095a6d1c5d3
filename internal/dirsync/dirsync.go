// Package dirsync makes changes to a directory's entries durable: after a
// file is created, renamed or removed, its directory must be synced too.
package dirsync

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Sync syncs dir.
func Sync(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Existing syncs those of dirs that exist.
func Existing(dirs ...string) error {
	for _, d := range dirs {
		if err := Sync(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// MkdirAll creates dir and any missing parents, and syncs the directory
// above each one it created, so that the new directories survive a crash.
func MkdirAll(dir string, perm os.FileMode) error {
	var made []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range made {
		if err := Sync(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}
