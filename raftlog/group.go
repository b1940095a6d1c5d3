package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

var (
	_ raft.LogStore    = (*GroupStore)(nil)
	_ raft.StableStore = (*GroupStore)(nil)
)

// GroupStore is the raft.LogStore and raft.StableStore of one Raft group
// inside a Store. It holds no state of its own and is safe for concurrent
// use; it stops working (ErrClosed) when its Store is closed.
//
// GroupStore does not implement raft.MonotonicLogStore: gaps in the log
// (after a snapshot restore) are fine, since FirstIndex and LastIndex seek
// rather than count.
type GroupStore struct {
	s  *Store
	id uint64
}

// ID returns the group id.
func (g *GroupStore) ID() uint64 { return g.id }

// FirstIndex returns the lowest stored log index, or 0 if there is none.
func (g *GroupStore) FirstIndex() (uint64, error) { return g.edgeIndex(true) }

// LastIndex returns the highest stored log index, or 0 if there is none.
func (g *GroupStore) LastIndex() (uint64, error) { return g.edgeIndex(false) }

func (g *GroupStore) edgeIndex(first bool) (uint64, error) {
	db, err := g.s.db.Acquire()
	if err != nil {
		return 0, err
	}
	defer g.s.db.Release()
	lo, hi := groupBounds(kindLog, g.id)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, fmt.Errorf("%w: group %d: new iterator: %w", ErrStorage, g.id, err)
	}
	var ok bool
	if first {
		ok = it.First()
	} else {
		ok = it.Last()
	}
	var idx uint64
	if ok {
		var valid bool
		if idx, valid = logIndexFromKey(it.Key()); !valid {
			err = fmt.Errorf("%w: group %d: malformed log key %x", ErrCorrupt, g.id, it.Key())
		}
	}
	if cerr := it.Close(); cerr != nil && err == nil { // Close returns it.Error()
		err = fmt.Errorf("%w: group %d: iterate log: %w", ErrStorage, g.id, cerr)
	}
	if err != nil {
		return 0, err
	}
	return idx, nil
}

// GetLog reads the entry at index into log. A missing entry yields
// raft.ErrLogNotFound itself, unwrapped, because raft compares it with ==.
func (g *GroupStore) GetLog(index uint64, log *raft.Log) error {
	db, err := g.s.db.Acquire()
	if err != nil {
		return err
	}
	defer g.s.db.Release()
	var kb [logKeyLen]byte
	v, closer, err := db.Get(appendLogKey(kb[:0], g.id, index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("%w: group %d: get log %d: %w", ErrStorage, g.id, index, err)
	}
	defer closer.Close()
	var l raft.Log
	if err := decodeLog(v, &l); err != nil {
		return fmt.Errorf("group %d: log %d: %w", g.id, index, err)
	}
	if l.Index != index {
		return fmt.Errorf("%w: group %d: key index %d holds log index %d", ErrCorrupt, g.id, index, l.Index)
	}
	*log = l
	return nil
}

// StoreLog stores a single entry, durably (see StoreLogs).
func (g *GroupStore) StoreLog(log *raft.Log) error {
	return g.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores entries in one atomic batch. Unless Options.NoSync is
// set, the batch is in the fsynced WAL when StoreLogs returns nil; syncs of
// concurrent callers, from any group, are coalesced by Pebble.
func (g *GroupStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	db, err := g.s.db.Acquire()
	if err != nil {
		return err
	}
	defer g.s.db.Release()
	start := time.Now()
	b := db.NewBatch()
	defer b.Close()
	var key [logKeyLen]byte
	var val []byte
	for _, l := range logs {
		if l == nil {
			return fmt.Errorf("%w: group %d: nil log entry", ErrInvalidArgument, g.id)
		}
		val = appendLog(val[:0], l)
		// Batch.Set copies key and value, so both buffers are reused.
		if err := b.Set(appendLogKey(key[:0], g.id, l.Index), val, nil); err != nil {
			return fmt.Errorf("%w: group %d: store log %d: %w", ErrStorage, g.id, l.Index, err)
		}
	}
	if err := b.Commit(g.s.wo); err != nil {
		return fmt.Errorf("%w: group %d: store %d logs: %w", ErrStorage, g.id, len(logs), err)
	}
	g.s.writes.add(len(logs), time.Since(start))
	return nil
}

// DeleteRange deletes the entries with min <= index <= max using a single
// Pebble range deletion. It is a no-op when min > max.
func (g *GroupStore) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	db, err := g.s.db.Acquire()
	if err != nil {
		return err
	}
	defer g.s.db.Release()
	lo := appendLogKey(nil, g.id, min)
	var hi []byte
	if max == math.MaxUint64 {
		_, hi = groupBounds(kindLog, g.id)
	} else {
		hi = appendLogKey(nil, g.id, max+1)
	}
	if err := db.DeleteRange(lo, hi, g.s.wo); err != nil {
		return fmt.Errorf("%w: group %d: delete logs [%d, %d]: %w", ErrStorage, g.id, min, max, err)
	}
	return nil
}

// Set stores val under key, durably.
func (g *GroupStore) Set(key, val []byte) error {
	db, err := g.s.db.Acquire()
	if err != nil {
		return err
	}
	defer g.s.db.Release()
	if err := db.Set(stableKey(g.id, key), val, g.s.wo); err != nil {
		return fmt.Errorf("%w: group %d: set %q: %w", ErrStorage, g.id, key, err)
	}
	return nil
}

// Get returns a copy of the value stored under key. A key that was never
// set yields (nil, ErrKeyNotFound); a key set to an empty value yields a
// non-nil empty slice.
func (g *GroupStore) Get(key []byte) ([]byte, error) {
	db, err := g.s.db.Acquire()
	if err != nil {
		return nil, err
	}
	defer g.s.db.Release()
	v, closer, err := db.Get(stableKey(g.id, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("%w: group %d: get %q: %w", ErrStorage, g.id, key, err)
	}
	defer closer.Close()
	return append(make([]byte, 0, len(v)), v...), nil
}

// SetUint64 stores val under key as 8 big-endian bytes, durably.
func (g *GroupStore) SetUint64(key []byte, val uint64) error {
	return g.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value stored by SetUint64, or (0, ErrKeyNotFound)
// for a key that was never set.
func (g *GroupStore) GetUint64(key []byte) (uint64, error) {
	v, err := g.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: group %d: key %q holds %d bytes, not a uint64", ErrCorrupt, g.id, key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
