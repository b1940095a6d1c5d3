// Package tiering is the cold tier of the grid (docs/design.md section 4):
// settled records that have left a shard's hot table live here, in Pebble,
// until their retention ends.
//
// # One database per node
//
// A Store is one Pebble instance in its own directory (the node puts it
// under <data-dir>/cold), apart from the Raft log (raftlog.Journal, its own
// segment files, synced on every write), whose workload is the opposite.
// Store.Shard returns a Shard, the keyspace.ColdTier of one shard; every
// key starts with the shard id, so all shards share one block cache, one
// set of compactions and one disk budget. Within a shard a record is
// stored once under its digest, and indexed twice with empty values: by
// deadline, for Purge, and by namespace tag and completed-at time, for
// Store.Audit (see keys.go for the layout). Index entries are written and
// deleted in the same batch as their record.
//
// # Derived state: no WAL, no sync
//
// The cold tier holds nothing that Raft does not: a shard's records are a
// function of its snapshot and of the log entries applied after it. The
// database therefore runs with the WAL disabled and commits without sync;
// a crash loses whatever was still in memtables, and the shard rebuilds
// its cold tier at start (Shard.Wipe then log replay, or Shard.Restore
// from the snapshot, which carries both tiers). Durability comes from Raft,
// and a cold write costs a memtable insert. Counters (Shard.Stats) are
// exact from that Wipe or Restore on.
//
// # Writes, reads and determinism
//
// The state machine calls Put, Delete and Purge from Apply, in log order,
// and Flush at the end of each Apply under its lock. The writes of one
// Apply go into one Pebble indexed batch, so Get sees them at once and the
// database sees them all together at Flush. Purge walks the deadline
// index in key order (deadline, then digest) and so removes the same
// records on every replica. Readers outside the state machine (stale
// reads, the CLI) call Lookup or Get at any time; they see the pending
// batch when there is one, and wait while the writer holds the shard
// (for one call, or for as long as a write stall lasts).
//
// Bloom filters (10 bits per key, about 1% false positives) on every
// level make a lookup of a digest the tier does not hold cost a few
// in-memory filter probes and no data block read, as long as the block
// cache holds the filter blocks (Options.CacheSize; about 1.25 bytes per
// key, three keys per record). Lookups seek a prefix iterator with
// IterOptions.UseL6Filters instead of calling DB.Get, because Pebble's Get
// skips the filters of the bottom level, where most records live: with Get
// a miss read an L6 data block (at 1M records, 0.47 block cache misses per
// miss, against 0.005 with the filters; see BenchmarkColdGet).
//
// # Snapshots and restore
//
// Shard.Snapshot flushes the pending batch and takes a Pebble snapshot:
// O(1), no copy, so the apply loop is held only for that. WriteTo then
// streams the shard's keys of all three kinds in key order (records with
// their values, and the index entries) with a trailing record count and
// CRC-32C while the shard goes on applying. Shard.Restore writes the
// stream, already sorted, straight into sstables and ingests them (about
// three times the rate of batches through the memtable, which also cost
// flushes and compactions), after checking that the index entries are
// exactly those the records imply. It writes into the shard's other
// generation (a byte of the key prefix) and switches generations only once
// the stream has been read and verified, so a corrupt or truncated
// snapshot (ErrCorruptSnapshot) leaves the previous records in place, as
// the state machine's own restore does.
//
// # Snapshot files: restarts without rewriting the cold tier
//
// Restoring from the stream rewrites every record (0.5 to 1.5 M records a
// second here), too slow for a node restarting with 10 M cold records.
// ShardSnapshot.WriteWithFiles therefore writes, in the same scan as the
// stream, the records as sstables into a directory per snapshot id beside
// the Raft snapshot (files.go), and puts the id and a random nonce in the
// stream's header. The files are fsynced and summed (CRC-32C), and a
// manifest written last, atomically, makes the directory valid.
// Shard.RestoreWithFiles reads the header and, when the directory holds
// that snapshot's files (same nonce, every size and checksum right),
// ingests hard links to them and does not read the rest of the stream:
// O(files) and a read of the files for the checksums, instead of a rewrite.
// It links rather than hands the files over because Pebble removes what it
// ingests, and the next restart needs them again. The files' keys carry
// generation 1, the one a restore into a wiped shard loads into; they are
// refused (and the stream read) when that generation is live and holds
// records, as ingesting over it could lose them. A snapshot installed from
// another replica has no files here, nor has one written before this
// format, and damaged or missing files also send the restore to the
// stream: the files only ever save time. The snapshot store that keeps the
// snapshots removes the files of those it no longer keeps
// (raftlog.Snapshots). ShardStats counts the restores of each kind.
//
// # Failures
//
// With the WAL off, a commit only inserts into the memtable: Pebble
// v2.1.7 does not return disk errors from Commit (an error there means
// its commit pipeline is broken, and it calls Logger.Fatalf). Disk errors
// happen in background flushes and compactions, and Pebble handles them
// as follows:
//
//   - A failed flush is reported to EventListener.BackgroundError and
//     rescheduled at once, in a loop without backoff (thousands of tries a
//     second, measured), until it succeeds; the memtables stay in memory
//     meanwhile, so no write is lost. The Store records the error for
//     Health, calls Options.OnError, logs at most one line a second, and
//     spaces the retries out (10 ms doubling to 1 s) by delaying table file
//     creation while failures go on (backoff.go).
//   - Once the queued memtables reach MemTableStopWritesThreshold (4)
//     times MemTableSize, commits block (a write stall) until a flush
//     succeeds. A full disk therefore stalls the applying state machine
//     rather than dropping cold writes or growing memory without bound;
//     Health reports the cause, and applying resumes by itself once space
//     is back. Close waits for a stalled commit.
//   - A failed compaction is reported the same way and picked again, its
//     retries spaced out alike; it blocks writes only once L0 reaches
//     L0StopWritesThreshold files.
//   - A failed MANIFEST write (after a flush or compaction wrote its
//     tables) is fatal: Pebble calls Logger.Fatalf, which panics. The node
//     would restart and rebuild the cold tier from Raft. To keep a filling
//     disk from getting there, the Store reserves a ballast
//     (Options.BallastSize, 64 MiB by default; ballast.go) and releases it
//     at the first ENOSPC: the write that met it is retried in the freed
//     room, and ErrDiskFull goes to OnError, the log and StoreStats. Only
//     once that room is used up too do the failures above begin.
//   - Restore's own sstable writes and ingestion fail with an ErrStorage
//     error, not retried: the restore fails and the shard keeps its
//     previous records.
//
// Health returns the last error not followed by a success of its kind
// (background errors clear on the next successful flush or compaction).
// Reads that fail are retried with backoff by Get (the state machine
// cannot proceed without the answer) and returned by Lookup. Commit
// failures, should Pebble ever return one, are retried with a copy of the
// batch, with backoff from 10 ms to 1 s, until they succeed or the Store
// closes: a cold write is never dropped while the Store is open.
//
// # Concurrency
//
// A Store is safe for concurrent use. Each Shard has one writer (the
// state machine); Get, Lookup and Stats may run beside it. Store.Close
// waits for operations in flight; after it, the ColdTier methods panic
// (the state machine must be stopped first) and the others return
// ErrClosed.
package tiering
