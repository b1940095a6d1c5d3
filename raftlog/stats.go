package raftlog

import (
	"sync/atomic"
	"time"
)

// WriteStats are the log writes of a Journal since it opened,
// for the node's metrics: how often Raft stores entries, how long that
// takes, and how many syncs carry them. Concurrent writes share one sync,
// so Writes/Fsyncs is how many group writes (of any shard) share one.
type WriteStats struct {
	// Writes is the StoreLog(s) calls that stored entries, Entries the
	// entries they stored, WriteTime their time from start to synced.
	Writes, Entries uint64
	WriteTime       time.Duration
	// Fsyncs is the journal's fdatasyncs, FsyncTime their time; both
	// zero with NoSync.
	Fsyncs    uint64
	FsyncTime time.Duration
}

// writeCounters accumulates the StoreLogs half of WriteStats.
type writeCounters struct {
	writes, entries, nanos atomic.Uint64
}

func (w *writeCounters) add(entries int, took time.Duration) {
	w.writes.Add(1)
	w.entries.Add(uint64(entries))
	w.nanos.Add(uint64(took))
}
