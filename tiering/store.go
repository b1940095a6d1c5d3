package tiering

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/l4xg/grid/internal/pebbleguard"
)

// formatVersion pins Pebble's on-disk format, as raftlog does, so that a
// Pebble upgrade does not silently ratchet it.
const formatVersion = pebble.FormatTableFormatV6

// bloomBitsPerKey sizes the bloom filter of every sstable: 10 bits per key
// give a false-positive rate of about 1%.
const bloomBitsPerKey = 10

// Store is the cold tier of one node: one Pebble database holding the
// records of all its shards, key-prefixed by shard. It is safe for
// concurrent use; see Shard for the per-shard contract.
type Store struct {
	opts Options
	dir  string
	// writerOpts are the options of the sstables Restore writes, the
	// database's own (bloom filters included).
	writerOpts sstable.WriterOptions
	log        *slog.Logger
	closing    chan struct{} // closed when Close starts
	once       sync.Once

	// db is held for every database operation, so Close waits for
	// operations in flight and later ones get ErrClosed instead of a Pebble
	// panic.
	db *pebbleguard.DB

	shardsMu sync.Mutex
	shards   map[uint32]*Shard

	health health
}

// Open opens or creates the cold tier in directory dir.
func Open(dir string, opts Options) (*Store, error) {
	o := opts.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		opts:    o,
		log:     o.Logger.With("component", "tiering"),
		closing: make(chan struct{}),
		shards:  make(map[uint32]*Shard),
	}
	s.health.init(s.log, o.OnError)
	fs, err := s.withBallast(&backoffFS{FS: o.FS, h: &s.health, closing: s.closing}, dir, o.BallastSize)
	if err != nil {
		return nil, err
	}
	po := &pebble.Options{
		CacheSize:          o.CacheSize,
		DisableWAL:         true,
		FS:                 fs,
		FormatMajorVersion: formatVersion,
		Logger:             pebbleLogger{o.Logger},
		MemTableSize:       o.MemTableSize,
		EventListener:      s.eventListener(),
	}
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrStorage, dir, err)
	}
	s.db, s.dir = pebbleguard.New(db, ErrClosed), dir
	wo := po.Clone()
	wo.EnsureDefaults()
	// Level 0's options: ingestion decides the level, and tables written
	// for the bottom level may mark keys obsolete on that assumption.
	s.writerOpts = wo.MakeWriterOptions(0, db.TableFormat())
	// Restore files a crash left behind.
	if err := o.FS.RemoveAll(o.FS.PathJoin(dir, ingestDir)); err != nil {
		return nil, errors.Join(fmt.Errorf("%w: clean %s: %w", ErrStorage, ingestDir, err), db.Close())
	}
	return s, nil
}

// eventListener routes Pebble's background failures (flushes and
// compactions that could not write, typically on a full disk) to Health and
// OnError, and clears them once a flush or compaction succeeds again.
func (s *Store) eventListener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			s.health.background.Add(1)
			s.health.consecutive.Add(1)
			s.health.fail(sourceBackground, fmt.Errorf("%w: background: %w", ErrStorage, err))
		},
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err == nil {
				s.health.consecutive.Store(0)
				s.health.recover(sourceBackground)
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err == nil {
				s.health.consecutive.Store(0)
				s.health.recover(sourceBackground)
			}
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			s.health.stalls.Add(1)
			s.health.stalled.Store(true)
			s.log.Warn("cold tier writes stalled", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			s.health.stalled.Store(false)
			s.log.Info("cold tier writes resumed")
		},
	}
}

// Close closes the database. It waits for operations in progress (a commit
// stalled on a full disk holds it until space returns); later operations
// return ErrClosed, and retry loops give up. Writes still buffered in a
// Shard are dropped: the cold tier is rebuilt from Raft at the next start.
// Closing a closed Store returns nil.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.closing) })
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("%w: close: %w", ErrStorage, err)
	}
	return nil
}

// Health returns the last storage error not yet followed by a success of
// the same kind (a failed flush is cleared by a successful flush or
// compaction, a failed commit by a successful commit), or nil. It returns
// ErrClosed after Close.
func (s *Store) Health() error {
	select {
	case <-s.closing:
		return ErrClosed
	default:
	}
	return s.health.err()
}

// StoreStats describe the node's cold tier database as a whole.
type StoreStats struct {
	DiskBytes        uint64 // bytes on disk: sstables, MANIFEST, temporary files
	Stalled          bool   // commits are blocked now (write stall)
	BallastReleased  bool   // the disk filled up since Open (ErrDiskFull)
	WriteStalls      uint64 // write stalls begun since Open
	BackgroundErrors uint64 // failed flushes and compactions since Open
	// Bloom filter probes that spared a data block read, and those that
	// did not (a false positive, or a key that is present).
	FilterHits, FilterMisses int64
}

// Stats returns the database's counters, for export.
func (s *Store) Stats() (StoreStats, error) {
	st := StoreStats{
		Stalled:          s.health.stalled.Load(),
		BallastReleased:  s.health.ballastReleased.Load(),
		WriteStalls:      s.health.stalls.Load(),
		BackgroundErrors: s.health.background.Load(),
	}
	err := s.db.With(func(db *pebble.DB) error {
		m := db.Metrics()
		st.DiskBytes = m.DiskSpaceUsage()
		st.FilterHits, st.FilterMisses = m.Filter.Hits, m.Filter.Misses
		return nil
	})
	return st, err
}

// Metrics returns Pebble's metrics (levels, block cache, bloom filter
// hits), for export and for tests.
func (s *Store) Metrics() (*pebble.Metrics, error) {
	var m *pebble.Metrics
	err := s.db.With(func(db *pebble.DB) error {
		m = db.Metrics()
		return nil
	})
	return m, err
}

// Shard returns the cold tier of shard id. Every call for the same id
// returns the same *Shard.
func (s *Store) Shard(id uint32) *Shard {
	s.shardsMu.Lock()
	defer s.shardsMu.Unlock()
	if sh, ok := s.shards[id]; ok {
		return sh
	}
	sh := newShard(s, id, s.findGen(id))
	s.shards[id] = sh
	return sh
}

// findGen returns the generation of the first key stored for shard id, or
// 0 when there is none. Shards are wiped or restored at start, which
// settles the generation anyway.
func (s *Store) findGen(id uint32) byte {
	var gen byte
	_ = s.db.With(func(db *pebble.DB) error {
		lo, hi := shardBounds(id)
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		if it.First() {
			gen = it.Key()[4]
		}
		return it.Close()
	})
	return gen
}

// retry runs op until it succeeds, backing off from 10 ms to 1 s between
// attempts and reporting each failure to Health and OnError. It gives up
// and returns the error when the store closes or op fails with ErrClosed or
// ErrCorrupt, which no retry fixes.
func (s *Store) retry(src errSource, op func() error) error {
	backoff := 10 * time.Millisecond
	failed := false
	for {
		err := op()
		if err == nil {
			if failed {
				s.health.recover(src)
			}
			return nil
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrCorrupt) {
			return err
		}
		failed = true
		s.health.fail(src, err)
		t := time.NewTimer(backoff)
		select {
		case <-s.closing:
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}
