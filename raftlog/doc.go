// Package raftlog provides the storage that hashicorp/raft needs from the
// outside world on a node that hosts many Raft groups (shards) at once: a
// log store, a stable store and a snapshot store per group.
//
// # One Pebble instance per node
//
// Every replica on a node writes its log entries with a synchronous commit
// before it acknowledges them, so the cost that dominates is the fsync, not
// the bytes. If each group owned its own database (one BoltDB file per
// group, as raft-boltdb does) a node with N groups would pay up to N fsyncs
// for N concurrent appends, and would keep N sets of files, caches and
// background goroutines. Instead, [Store] opens ONE Pebble database per node
// and every group's log and stable keys live in it, separated by a key
// prefix. Pebble's commit pipeline appends concurrently committed batches to
// a single write-ahead log and covers all of them with one fsync (group
// commit), so many shards appending at the same time share the cost of the
// sync instead of queueing behind each other. BenchmarkStoreLogsSync8Groups
// reports how many WAL fsyncs each batch costs.
//
// [Store.Group] returns a cheap [GroupStore] handle that implements both
// raft.LogStore and raft.StableStore for one group. Handles are stateless
// views over the shared database: any number of them, for the same or for
// different groups, may be used concurrently.
//
// # Key layout
//
// All integers are big-endian so that Pebble's bytewise ordering is numeric
// ordering, which makes "the first/last entry of group g" an iterator seek
// bounded by the group's prefix, and "entries min..max" one contiguous range.
//
//	log entry:    [0x01][group id: 8 bytes][log index: 8 bytes]  -> encoded raft.Log
//	stable value: [0x02][group id: 8 bytes][key bytes...]        -> raw value
//	store meta:   [0x00]"layout"                                 -> layout version (1 byte)
//
// The first byte (the kind) keeps log and stable keys of all groups apart;
// the fixed-width group id means no group's keys can be a prefix of another
// group's. The meta key records the version of this layout so that a future
// incompatible layout is detected at [Open] rather than misread.
//
// Log values use a compact versioned binary encoding (see encoding.go):
// a version byte, the log type, a flags byte, then uvarint index, term,
// length-prefixed data and extensions, and the optional AppendedAt time.
// Decoding validates every length against the input and returns an error
// wrapping [ErrCorrupt] on malformed input; it never panics (FuzzDecodeLog).
//
// # Sync policy
//
// Every write that hashicorp/raft makes through a GroupStore (StoreLog,
// StoreLogs, DeleteRange, Set, SetUint64) and [Store.DeleteGroup] commits
// with pebble.Sync: when the call returns nil the change is in the WAL and
// fsynced, so an acknowledged entry, term or vote survives kill -9 and power
// loss. A StoreLogs call is one Pebble batch, so a batch of entries becomes
// durable atomically. Options.NoSync turns the syncs off; it exists only for
// tests and benchmarks and is unsafe for a real replica, because a replica
// that forgets an entry or a vote it acknowledged can break Raft's safety.
//
// DeleteRange (log compaction after a snapshot, and truncation of a
// conflicting suffix on a follower) is a single Pebble range deletion, so its
// cost does not depend on the number of entries removed. DeleteGroup removes
// a group's log and stable keys with two range deletions in one batch.
//
// # Errors
//
// Errors returned by this package wrap one of the "raftlog: ..." sentinel
// errors and can be tested with errors.Is. Two deliberate exceptions follow
// what hashicorp/raft compares by identity or by message:
// GroupStore.GetLog returns raft.ErrLogNotFound itself (raft compares it
// with ==), and a stable-store miss returns [ErrKeyNotFound], whose message is
// exactly "not found" (raft checks err.Error() == "not found", the convention
// set by raft-boltdb).
//
// # Snapshots
//
// Snapshots are not stored in Pebble: [NewSnapshotStore] gives each group a
// raft.FileSnapshotStore in its own directory, dir/group-<id>.
//
// # Not here yet
//
// The multiplexed network transport that lets all groups on a node share
// connections to their peers is a separate piece of work (a later issue);
// until then callers use any raft.Transport per group, such as
// raft.NewInmemTransport in tests.
package raftlog
