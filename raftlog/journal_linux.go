package raftlog

import (
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves size bytes for f, so that writing into them changes
// no file size: fdatasync then has no metadata to write.
func preallocate(f *os.File, size int64) error {
	return unix.Fallocate(int(f.Fd()), 0, 0, size)
}

// fdatasync syncs f's data (and only the metadata needed to read it back).
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
