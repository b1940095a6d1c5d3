// Package raftlog provides what hashicorp/raft needs from the outside world
// on a node that hosts many Raft groups (shards) at once: a log store, a
// stable store and a snapshot store per group, and one network transport
// that all the groups share.
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
// Snapshots are not stored in Pebble: [OpenSnapshots] gives each group a
// raft.FileSnapshotStore in its own directory, dir/group-<id>, and owns the
// files a snapshot carries beside its stream (the cold tier's sstables, in
// dir/cold/group-<id>/<snapshot id>): it removes those of the snapshots it
// reaps, and [PurgeSnapshots] removes a group's snapshots with their files.
//
// # Timeouts and logs
//
// [SetTimeouts] is the one rule for a group's failure detection: heartbeat,
// election and leader lease all equal the heartbeat timeout. [RaftLogger]
// sends hashicorp/raft's log lines (its Raft and snapshot store) to the
// node's slog logger at warn and above, so an operator sees Raft's warnings
// and errors. The transport keeps a null logger: raft's NetworkTransport
// logs every connection closed under it (a replica stopped, a peer gone) as
// an error.
//
// # Multiplexed transport
//
// A node hosts many groups (its shard replicas and possibly a member of the
// control group) but listens on ONE TCP port for all of their Raft traffic,
// the rqlite tcp/mux way. [Mux] owns the listener. Each group registers with
// [Mux.Layer] and gets a raft.StreamLayer, on which hashicorp/raft's
// NetworkTransport runs unchanged, so pooled connections are kept
// ([NewTransport] does both steps). Pipelined AppendEntries are turned off:
// raft 1.7.2 can hang in Shutdown on a stuck pipeline (raft#612), and one
// large group-committed entry in flight per shard leaves nothing to gain. Every group on a
// node has the same address, the Mux's advertised address, and groups are
// told apart by the connection header alone.
//
// A dialing layer opens a TCP connection to the peer's Mux and writes a
// header before any Raft byte (see header.go): the magic "L4XM", a version,
// the group id, and the dialer's own advertised address, so the accepting
// side knows which peer it talks to. The accepting Mux reads each header in
// its own goroutine under a deadline (MuxConfig.HeaderTimeout), so a slow or
// garbage client delays no other connection, and reads exactly the header
// and nothing more. It then hands the connection to the group's layer, or
// closes it: a bad header (logged as a warning), or a group that has no
// layer on this node (logged at debug level: the node may not host that
// shard yet, and raft retries). Decoding validates every byte and never
// panics (FuzzReadHeader); there is no reply, so a refused dialer sees its
// connection closed and raft treats it as a failed RPC.
//
// A layer tracks every connection it dialed or accepted. Closing it (which
// raft.NetworkTransport.Close does) unregisters the group, makes Accept and
// Dial fail with [ErrLayerClosed], and closes those connections, which
// NetworkTransport itself would leave open, so no connection handler
// goroutine outlives the transport. A group may be registered again after
// its layer is closed. [Mux.Close] closes the listener, every layer and
// every connection, and waits for the Mux's goroutines to exit.
//
// There is no TLS and no authentication yet: the advertised address in a
// header is taken on trust, and anyone who can reach the port can speak
// Raft to any group. Keep the Raft listener on a trusted network.
//
// # Fault injection
//
// [Faults], given to a Mux in MuxConfig, lets in-process cluster tests cut
// a node off from chosen peers ([Faults.Block]) or from all of them
// ([Faults.Isolate]) and undo it ([Faults.Unblock], [Faults.Heal]). A
// blocked peer's live connections, in both directions, are closed at once;
// dials to it fail with [ErrPeerBlocked]; connections from it are closed
// right after their header. [Faults.Pause] stalls all of a Mux's traffic
// without closing anything, until [Faults.Resume]: peers see silence and
// timeouts, as from a stopped process. A nil Faults injects nothing, so
// production code pays one nil check per connection, read and write.
package raftlog
