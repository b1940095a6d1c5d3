package tiering

import (
	"sync/atomic"
	"time"
)

// latencyBounds are the inclusive upper bounds of the lookup latency
// histogram buckets; a last, unbounded bucket follows them.
var latencyBounds = [...]time.Duration{
	5 * time.Microsecond, 10 * time.Microsecond, 25 * time.Microsecond,
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond,
	500 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond,
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond,
}

// ShardStats are the counters of one shard's cold tier. Keys and Bytes
// describe the records held (Bytes is the logical size written: record key
// and value plus both index keys, before compression); they are exact from
// the shard's last Wipe or Restore, which shard start always runs. The other
// counters only grow while the process runs.
type ShardStats struct {
	Keys    int64
	Bytes   int64
	Puts    uint64 // records demoted into the cold tier
	Deletes uint64 // records removed by Delete (promotions, forgets)
	Purged  uint64 // records removed by Purge at their retention end
	Lookups uint64 // Get and Lookup calls
	Hits    uint64 // lookups that found a record
	// Restores that ingested local snapshot files, and those that read
	// the records from the stream (RestoreWithFiles).
	FileRestores, StreamRestores uint64

	// LookupLatency is the time spent in Pebble reads of lookups.
	LookupLatency Histogram
}

// Histogram is a latency histogram with fixed buckets, in the shape
// Prometheus expects: Counts[i] counts observations <= Bounds[i] and above
// the previous bound (not cumulative); Counts[len(Bounds)] counts the rest.
type Histogram struct {
	Bounds []time.Duration
	Counts []uint64
	Count  uint64
	Sum    time.Duration
}

// counters are the live, lock-free counters behind ShardStats.
type counters struct {
	keys, bytes                          atomic.Int64
	puts, deletes, purged, lookups, hits atomic.Uint64
	fileRestores, streamRestores         atomic.Uint64
	latency                              [len(latencyBounds) + 1]atomic.Uint64
	latencySum                           atomic.Int64
}

func (c *counters) observe(d time.Duration) {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	c.latency[i].Add(1)
	c.latencySum.Add(int64(d))
}

func (c *counters) snapshot() ShardStats {
	st := ShardStats{
		Keys:    c.keys.Load(),
		Bytes:   c.bytes.Load(),
		Puts:    c.puts.Load(),
		Deletes: c.deletes.Load(),
		Purged:  c.purged.Load(),
		Lookups: c.lookups.Load(),
		Hits:    c.hits.Load(),

		FileRestores:   c.fileRestores.Load(),
		StreamRestores: c.streamRestores.Load(),
		LookupLatency: Histogram{
			Bounds: append([]time.Duration(nil), latencyBounds[:]...),
			Counts: make([]uint64, len(latencyBounds)+1),
			Sum:    time.Duration(c.latencySum.Load()),
		},
	}
	for i := range c.latency {
		n := c.latency[i].Load()
		st.LookupLatency.Counts[i] = n
		st.LookupLatency.Count += n
	}
	return st
}

// recordBytes is the logical size of a record with a value of n bytes.
func recordBytes(n int) int64 {
	return int64(recordKeyLen + n + expiryKeyLen + auditKeyLen)
}
