package tiering

import (
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// DefaultBallastSize is the disk space reserved when Options.BallastSize is
// zero.
const DefaultBallastSize int64 = 64 << 20

// ErrDiskFull reports that the disk filled up and the ballast was released
// to let Pebble finish its writes.
var ErrDiskFull = errors.New("tiering: disk full, ballast released")

const ballastName = "BALLAST"

// A ballast is a file of reserved but unwritten blocks (fallocate with
// KEEP_SIZE) in the database directory, the CockroachDB way. The first
// write that meets ENOSPC removes it (vfs.OnDiskFull blocks new writes
// meanwhile, then retries the failed one), so Pebble's MANIFEST updates,
// whose failure it treats as fatal, and the flushes in progress find room.
// The Store reports ErrDiskFull through OnError, the log and StoreStats
// (not Health: writes succeed again); the next Open reserves the ballast
// again.
func (s *Store) withBallast(fs vfs.FS, dir string, size int64) (vfs.FS, error) {
	if size <= 0 {
		return fs, nil
	}
	inner := s.opts.FS
	if err := inner.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	path := inner.PathJoin(dir, ballastName)
	f, err := inner.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("%w: create ballast: %w", ErrStorage, err)
	}
	err = f.Preallocate(0, size)
	err = errors.Join(err, f.Sync(), f.Close())
	if err != nil {
		// No room, or no fallocate: run without it rather than not at all.
		_ = inner.Remove(path)
		s.log.Warn("cold tier runs without a disk ballast", "size", size, "err", err)
		return fs, nil
	}
	return vfs.OnDiskFull(fs, func() {
		if s.health.ballastReleased.Swap(true) {
			return
		}
		err := inner.Remove(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Error("cannot remove the disk ballast", "err", err)
		}
		// Not a Health error: writes go on, in the room the ballast left.
		s.log.Error("cold tier disk full: ballast released; free space before it fills again", "size", size)
		if s.opts.OnError != nil {
			s.opts.OnError(ErrDiskFull)
		}
	}), nil
}
