package raftlog

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

var (
	_ raft.LogStore          = (*JournalGroup)(nil)
	_ raft.StableStore       = (*JournalGroup)(nil)
	_ raft.MonotonicLogStore = (*JournalGroup)(nil)
)

// JournalGroup is the raft.LogStore and raft.StableStore of one Raft group
// in a Journal. It holds no state of its own and is safe for concurrent
// use; it stops working (ErrClosed) when its Journal is closed.
//
// It is a raft.MonotonicLogStore: after restoring a snapshot, raft deletes
// the whole log instead of leaving a gap, so a group's entries are always
// one contiguous run.
type JournalGroup struct {
	j  *Journal
	id uint64
}

// ID returns the group id.
func (g *JournalGroup) ID() uint64 { return g.id }

// IsMonotonic reports true: see JournalGroup.
func (g *JournalGroup) IsMonotonic() bool { return true }

// FirstIndex returns the lowest stored log index, or 0 if there is none.
func (g *JournalGroup) FirstIndex() (uint64, error) {
	first, _, err := g.bounds()
	return first, err
}

// LastIndex returns the highest stored log index, or 0 if there is none.
func (g *JournalGroup) LastIndex() (uint64, error) {
	_, last, err := g.bounds()
	return last, err
}

func (g *JournalGroup) bounds() (first, last uint64, err error) {
	g.j.idx.RLock()
	defer g.j.idx.RUnlock()
	if g.j.groups == nil {
		return 0, 0, ErrClosed
	}
	jg := g.j.groups[g.id]
	if jg == nil || len(jg.pos) == 0 {
		return 0, 0, nil
	}
	return jg.first, jg.last(), nil
}

// GetLog reads the entry at index into log. A missing entry yields
// raft.ErrLogNotFound itself, unwrapped, because raft compares it with ==.
func (g *JournalGroup) GetLog(index uint64, log *raft.Log) error {
	buf := g.j.readBufs.Get().(*[]byte)
	defer g.j.readBufs.Put(buf)
	var err error
	g.j.idx.RLock()
	if g.j.groups == nil {
		g.j.idx.RUnlock()
		return ErrClosed
	}
	jg := g.j.groups[g.id]
	if jg == nil || len(jg.pos) == 0 || index < jg.first || index > jg.last() {
		g.j.idx.RUnlock()
		return raft.ErrLogNotFound
	}
	*buf, err = g.j.readAt((*buf)[:0], jg.pos[index-jg.first])
	g.j.idx.RUnlock()
	if err != nil {
		return fmt.Errorf("group %d: log %d: %w", g.id, index, err)
	}
	var l raft.Log
	if err := decodeLog(*buf, &l); err != nil {
		return fmt.Errorf("group %d: log %d: %w", g.id, index, err)
	}
	if l.Index != index {
		return fmt.Errorf("%w: group %d: log %d is stored as %d", ErrCorrupt, g.id, index, l.Index)
	}
	*log = l
	return nil
}

// StoreLog stores a single entry, durably (see StoreLogs).
func (g *JournalGroup) StoreLog(log *raft.Log) error {
	return g.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores consecutive entries as one record, so they become
// durable together. The record is in the synced journal when StoreLogs
// returns nil; concurrent writers of any group share the sync.
//
// The entries must follow the group's log as it stands when StoreLogs is
// called (raft appends to a group from one goroutine): the first one's
// index lies in [first, last+1], replacing the entries from there on, or
// the log is empty. Anything else is refused with ErrInvalidArgument
// rather than taken for a new log: an append past the end means a write
// before it was lost. While the disk has no room for the journal's next
// segment, StoreLogs fails with ErrNoSpace (see Journal).
func (g *JournalGroup) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	first, last, err := g.bounds()
	if err != nil {
		return err
	}
	if next := logs[0]; next != nil && last != 0 && (next.Index < first || next.Index > last+1) {
		return fmt.Errorf("%w: group %d: entry %d does not follow the log [%d, %d]", ErrInvalidArgument, g.id, next.Index, first, last)
	}
	// Refused before anything is copied when the payloads alone fill a
	// record: the headers around them make it too big.
	size := 0
	for _, l := range logs {
		if l != nil {
			size += len(l.Data) + len(l.Extensions)
		}
	}
	if size >= maxRecordLen {
		return fmt.Errorf("%w: group %d: %d entries of %d bytes in all are over the %d bytes one write can hold",
			ErrInvalidArgument, g.id, len(logs), size, maxRecordLen)
	}
	start := time.Now()
	buf := g.j.encodeBufs.Get().(*[]byte)
	defer g.j.encodeBufs.Put(buf)
	b, at := beginRecord((*buf)[:0], recEntries)
	b = binary.AppendUvarint(b, g.id)
	var enc []byte
	for i, l := range logs {
		if l == nil {
			return fmt.Errorf("%w: group %d: nil log entry", ErrInvalidArgument, g.id)
		}
		if l.Index == 0 || (i > 0 && l.Index != logs[i-1].Index+1) {
			return fmt.Errorf("%w: group %d: entry %d out of sequence (entries are numbered from 1 and stored in order)", ErrInvalidArgument, g.id, l.Index)
		}
		enc = appendLog(enc[:0], l)
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	if len(b)-at-recHeaderLen > maxRecordLen {
		return fmt.Errorf("%w: group %d: %d entries of %d bytes in all are over the %d bytes one write can hold",
			ErrInvalidArgument, g.id, len(logs), len(b)-at, maxRecordLen)
	}
	*buf = finishRecord(b, at)
	if err := g.j.commit(*buf, true); err != nil {
		return fmt.Errorf("group %d: store %d logs: %w", g.id, len(logs), err)
	}
	g.j.writes.add(len(logs), time.Since(start))
	return nil
}

// DeleteRange deletes the entries with min <= index <= max, durably. Raft
// deletes a prefix (compaction), a suffix (a conflicting tail) or
// everything; a range strictly inside the log would leave a hole, and is
// refused with ErrInvalidArgument. It is a no-op when min > max.
func (g *JournalGroup) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	first, last, err := g.bounds()
	if err != nil {
		return err
	}
	if last != 0 && min > first && max < last {
		return fmt.Errorf("%w: group %d: deleting [%d, %d] would leave a hole in [%d, %d]", ErrInvalidArgument, g.id, min, max, first, last)
	}
	if err := g.j.commit(appendDeleteRangeRecord(nil, g.id, min, max), false); err != nil {
		return fmt.Errorf("group %d: delete logs [%d, %d]: %w", g.id, min, max, err)
	}
	return nil
}

// Set stores val under key, durably.
func (g *JournalGroup) Set(key, val []byte) error {
	if len(key)+len(val) > maxRecordLen-32 {
		return fmt.Errorf("%w: group %d: stable value of %d bytes is over the %d bytes one write can hold", ErrInvalidArgument, g.id, len(key)+len(val), maxRecordLen)
	}
	if err := g.j.commit(appendStableRecord(nil, g.id, key, val), false); err != nil {
		return fmt.Errorf("group %d: set %q: %w", g.id, key, err)
	}
	return nil
}

// Get returns a copy of the value stored under key. A key that was never
// set yields (nil, ErrKeyNotFound); a key set to an empty value yields a
// non-nil empty slice.
func (g *JournalGroup) Get(key []byte) ([]byte, error) {
	g.j.idx.RLock()
	defer g.j.idx.RUnlock()
	if g.j.groups == nil {
		return nil, ErrClosed
	}
	if jg := g.j.groups[g.id]; jg != nil {
		if v, ok := jg.stable[string(key)]; ok {
			return append(make([]byte, 0, len(v)), v...), nil
		}
	}
	return nil, ErrKeyNotFound
}

// SetUint64 stores val under key as 8 big-endian bytes, durably.
func (g *JournalGroup) SetUint64(key []byte, val uint64) error {
	return g.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value stored by SetUint64, or (0, ErrKeyNotFound)
// for a key that was never set.
func (g *JournalGroup) GetUint64(key []byte) (uint64, error) {
	v, err := g.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: group %d: key %q holds %d bytes, not a uint64", ErrCorrupt, g.id, key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
