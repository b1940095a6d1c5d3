package raftlog

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/l4xg/grid/internal/pebbleguard"
)

// Sentinel errors. Returned errors wrap one of these (test with errors.Is),
// except for the two cases that hashicorp/raft matches exactly; see
// ErrKeyNotFound and GroupStore.GetLog.
var (
	// ErrClosed is returned by any operation on a Store after Close.
	ErrClosed = errors.New("raftlog: store closed")
	// ErrCorrupt reports a stored value or key that cannot be decoded.
	ErrCorrupt = errors.New("raftlog: corrupt data")
	// ErrInvalidOptions reports an Options value that fails Validate.
	ErrInvalidOptions = errors.New("raftlog: invalid options")
	// ErrInvalidArgument reports a bad argument, such as a nil log entry.
	ErrInvalidArgument = errors.New("raftlog: invalid argument")
	// ErrIncompatibleLayout reports a database written with a key layout
	// this version of the package does not understand.
	ErrIncompatibleLayout = errors.New("raftlog: incompatible on-disk layout")
	// ErrStorage wraps an error from the underlying Pebble database.
	ErrStorage = errors.New("raftlog: storage error")

	// ErrKeyNotFound is returned, unwrapped, by GroupStore.Get and
	// GroupStore.GetUint64 for a key that was never set. Its message is
	// exactly "not found", without the package prefix, because
	// hashicorp/raft recognises stable-store misses by comparing
	// err.Error() == "not found" (the convention of raft-boltdb).
	ErrKeyNotFound = errors.New("not found")
)

// DefaultCacheSize is the Pebble block cache size used when
// Options.CacheSize is zero.
const DefaultCacheSize int64 = 32 << 20

// Logger receives Pebble's log messages. It has the same method set as
// pebble.Logger, so pebble.DefaultLogger and any pebble.Logger satisfy it.
// Fatalf must not return.
type Logger interface {
	Infof(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Options configures a Store. The zero value is the recommended
// production configuration.
type Options struct {
	// CacheSize is the size in bytes of Pebble's block cache, shared by all
	// groups. Zero means DefaultCacheSize.
	CacheSize int64

	// NoSync makes writes return before they are fsynced. UNSAFE: a crash
	// or power loss can then lose log entries, terms and votes that raft
	// has already acknowledged, which breaks Raft's safety guarantees.
	// For tests and benchmarks only.
	NoSync bool

	// Logger receives Pebble's log messages. Nil means pebble.DefaultLogger,
	// which writes to the standard library's log package.
	Logger Logger
}

// withDefaults is o with every unset field at its default.
func (o Options) withDefaults() Options {
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	return o
}

// Validate reports whether o, with its defaults, is usable, wrapping
// ErrInvalidOptions if not.
func (o Options) Validate() error {
	o = o.withDefaults()
	if o.CacheSize < 0 {
		return fmt.Errorf("%w: negative CacheSize %d", ErrInvalidOptions, o.CacheSize)
	}
	return nil
}

// formatVersion pins Pebble's on-disk format so that upgrading the Pebble
// dependency does not silently ratchet the format (which would prevent
// rolling back the binary). Raise it deliberately.
const formatVersion = pebble.FormatTableFormatV6

// memTableSize replaces Pebble's 4 MiB default. Raft logs are write-heavy
// and short-lived (compacted after each snapshot): a larger memtable rotates
// the WAL and flushes far less often, and entries whose range deletion lands
// before the flush are usually dropped by the flush instead of being written
// to an sstable. Pebble grows memtables up to this size gradually, so small
// stores do not pay for it.
const memTableSize = 64 << 20

// Store is one Pebble database holding the Raft logs and stable stores of
// every group on a node: the Raft log of the builds before [Journal]. It is
// kept so that [OpenJournalFrom] can move a data dir they wrote; a Store's
// writes commit with pebble.Sync, and concurrent batches share Pebble's WAL
// fsync. It is safe for concurrent use. Use Group to obtain
// the per-group raft.LogStore / raft.StableStore.
type Store struct {
	wo *pebble.WriteOptions

	// db is held for every database operation, so Close waits for
	// in-flight operations and later ones get ErrClosed instead of a Pebble
	// panic.
	db *pebbleguard.DB

	writes writeCounters // for WriteStats
}

// Open opens or creates the store in directory dir.
func Open(dir string, opts Options) (*Store, error) {
	return open(dir, opts, nil)
}

// open is Open with an optional filesystem, used by tests to observe syncs.
func open(dir string, opts Options, fs vfs.FS) (*Store, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	po := &pebble.Options{
		CacheSize:          opts.CacheSize,
		FormatMajorVersion: formatVersion,
		FS:                 fs,
		MemTableSize:       memTableSize,
	}
	if opts.Logger != nil {
		po.Logger = opts.Logger
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrStorage, dir, err)
	}
	s := &Store{db: pebbleguard.New(db, ErrClosed), wo: pebble.Sync}
	if opts.NoSync {
		s.wo = pebble.NoSync
	}
	if err := checkLayout(db, s.wo); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return s, nil
}

// checkLayout records layoutVersion in a new store and rejects a store
// written with a different one.
func checkLayout(db *pebble.DB, wo *pebble.WriteOptions) error {
	v, closer, err := db.Get(metaLayoutKey)
	if errors.Is(err, pebble.ErrNotFound) {
		if err := db.Set(metaLayoutKey, []byte{layoutVersion}, wo); err != nil {
			return fmt.Errorf("%w: write layout version: %w", ErrStorage, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: read layout version: %w", ErrStorage, err)
	}
	defer closer.Close()
	if len(v) != 1 || v[0] != layoutVersion {
		return fmt.Errorf("%w: found layout %x, want %d", ErrIncompatibleLayout, v, layoutVersion)
	}
	return nil
}

// Close closes the database. It waits for operations in progress;
// operations started afterwards return ErrClosed. Closing a closed Store
// returns nil.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("%w: close: %w", ErrStorage, err)
	}
	return nil
}

// Group returns the log and stable store of Raft group id. The returned
// value is a lightweight handle; calling Group again for the same id returns
// an equivalent handle over the same data.
func (s *Store) Group(id uint64) *GroupStore {
	return &GroupStore{s: s, id: id}
}

// DeleteGroup removes every log entry and stable key of group id, in one
// synced batch. Snapshots live outside the Store and are not touched.
// Raft must no longer be running on the group.
func (s *Store) DeleteGroup(id uint64) error {
	db, err := s.db.Acquire()
	if err != nil {
		return err
	}
	defer s.db.Release()
	b := db.NewBatch()
	defer b.Close()
	for _, kind := range []byte{kindLog, kindStable} {
		lo, hi := groupBounds(kind, id)
		if err := b.DeleteRange(lo, hi, nil); err != nil {
			return fmt.Errorf("%w: group %d: delete group: %w", ErrStorage, id, err)
		}
	}
	if err := b.Commit(s.wo); err != nil {
		return fmt.Errorf("%w: group %d: delete group: %w", ErrStorage, id, err)
	}
	return nil
}
