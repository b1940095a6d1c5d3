package raftlog

import (
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// WriteStats are the log writes of a Journal (or a Store) since it opened,
// for the node's metrics: how often Raft stores entries, how long that
// takes, and how many syncs carry them. Concurrent writes share one sync,
// so Writes/Fsyncs is how many group writes (of any shard) share one.
type WriteStats struct {
	// Writes is the StoreLog(s) calls that stored entries, Entries the
	// entries they stored, WriteTime their time from start to synced.
	Writes, Entries uint64
	WriteTime       time.Duration
	// Fsyncs is the journal's fdatasyncs (a Store's WAL fsyncs),
	// FsyncTime their time; both zero with NoSync.
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

// WriteStats returns the store's write statistics so far (zero after
// Close).
func (s *Store) WriteStats() WriteStats {
	st := WriteStats{
		Writes:    s.writes.writes.Load(),
		Entries:   s.writes.entries.Load(),
		WriteTime: time.Duration(s.writes.nanos.Load()),
	}
	db, err := s.db.Acquire()
	if err != nil {
		return st
	}
	defer s.db.Release()
	// Pebble times each WAL fsync in a histogram of nanoseconds.
	if h := db.Metrics().LogWriter.FsyncLatency; h != nil {
		var m dto.Metric
		if h.Write(&m) == nil && m.Histogram != nil {
			st.Fsyncs = m.Histogram.GetSampleCount()
			st.FsyncTime = time.Duration(m.Histogram.GetSampleSum())
		}
	}
	return st
}
