package tiering

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Sentinel errors. Returned errors wrap one of these; test with errors.Is.
var (
	// ErrClosed is returned by operations on a Store after Close.
	ErrClosed = errors.New("tiering: store closed")
	// ErrInvalidOptions reports an Options value that fails Validate.
	ErrInvalidOptions = errors.New("tiering: invalid options")
	// ErrStorage wraps an error from Pebble.
	ErrStorage = errors.New("tiering: storage error")
	// ErrCorrupt reports a stored key or value that does not decode.
	ErrCorrupt = errors.New("tiering: corrupt data")
	// ErrCorruptSnapshot reports a snapshot stream that does not decode.
	ErrCorruptSnapshot = errors.New("tiering: corrupt snapshot")
)

// DefaultCacheSize is the block cache size used when Options.CacheSize is 0.
const DefaultCacheSize int64 = 64 << 20

// DefaultMemTableSize is the memtable size used when Options.MemTableSize is 0.
const DefaultMemTableSize uint64 = 16 << 20

// Options configures a Store. The zero value is the production default.
// All settings are soft: the cold tier is derived state (see the package
// documentation), so they may change between restarts.
type Options struct {
	// FS is the filesystem Pebble uses. Nil means vfs.Default. Tests inject
	// faults through it.
	FS vfs.FS

	// CacheSize is the size in bytes of Pebble's block cache. Bloom filter
	// blocks live in it: it must be large enough to hold them (about 1.25
	// bytes per key at 10 bits per key) for misses to stay off the disk.
	// Zero means DefaultCacheSize.
	CacheSize int64

	// MemTableSize is the size of one Pebble memtable. Zero means
	// DefaultMemTableSize.
	MemTableSize uint64

	// Logger receives Pebble's log messages and the Store's own. Nil means
	// slog.Default().
	Logger *slog.Logger

	// BallastSize is the disk space reserved in the database directory and
	// released when the disk fills up, so that Pebble can complete the
	// writes it has started (see ballast.go). Zero means
	// DefaultBallastSize; negative means none.
	BallastSize int64

	// OnError, when set, is called (from a Pebble background goroutine or
	// from the caller of Flush) with every storage error: failed flushes and
	// compactions (disk full) and failed commits. It must not block and
	// must not call back into the Store.
	OnError func(error)
}

// Validate reports whether o, with its defaults, is usable, wrapping
// ErrInvalidOptions if not.
func (o Options) Validate() error {
	o = o.withDefaults()
	if o.CacheSize < 0 {
		return fmt.Errorf("%w: negative CacheSize %d", ErrInvalidOptions, o.CacheSize)
	}
	if o.MemTableSize != 0 && (o.MemTableSize < 64<<10 || o.MemTableSize >= 4<<30) {
		return fmt.Errorf("%w: MemTableSize %d outside 64 KiB .. 4 GiB", ErrInvalidOptions, o.MemTableSize)
	}
	return nil
}

// withDefaults is o with every unset field at its default: the one place
// the cold tier's defaults are.
func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.BallastSize == 0 {
		o.BallastSize = DefaultBallastSize
	}
	return o
}

// pebbleLogger adapts a *slog.Logger to pebble.Logger.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...), "component", "tiering/pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "tiering/pebble")
}

// Fatalf must not return (Pebble's contract): Pebble calls it when its
// state is undefined, e.g. after a failed MANIFEST write. It logs and panics.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "tiering/pebble", "fatal", true)
	panic("tiering: pebble fatal: " + msg)
}
