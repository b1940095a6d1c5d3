//go:build !linux

package raftlog

import "os"

// preallocate sizes f; without fallocate the space is not reserved.
func preallocate(f *os.File, size int64) error { return f.Truncate(size) }

// fdatasync syncs f.
func fdatasync(f *os.File) error { return f.Sync() }
