// Package dirsync makes changes to a directory's entries durable: after a
// file is created, renamed or removed, its directory must be synced too.
package dirsync

import (
	"errors"
	"io/fs"
	"os"
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
