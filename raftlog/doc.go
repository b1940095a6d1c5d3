// Package raftlog provides what hashicorp/raft needs from the outside world
// on a node that hosts many Raft groups (shards) at once: a log store, a
// stable store and a snapshot store per group, and one network transport
// that all the groups share.
//
// # One journal per node
//
// Every replica on a node syncs its log entries before it acknowledges
// them, so the cost that dominates is the fsync, not the bytes. [Journal]
// keeps the logs and stable stores of every group on the node in ONE
// sequence of segment files, so that groups appending at the same time
// share a sync instead of queueing behind each other: a writer appends its
// record to a pending buffer, and whichever writer finds no write in
// progress writes the whole buffer with one write and one fdatasync (group
// commit), then wakes the writers it carried. [Journal.Group] returns a
// cheap [JournalGroup] handle that implements raft.LogStore,
// raft.StableStore and raft.MonotonicLogStore for one group.
//
// The journal replaced a Pebble database shared by the groups, measured
// side by side (bf84885): at equal durability (an fdatasync before every
// acknowledgement) the journal does less per write (no memtable, no batch,
// no commit pipeline hand-off) and its fdatasync has no file size to
// update. [OpenJournalFrom] moves the database an older build left in a
// data dir into a journal, once (migrate.go reads it, read-only).
//
// # Segments, frames and records
//
// A segment is a file named by its id (16 hex digits, ".seg"),
// preallocated to JournalOptions.SegmentSize (64 MiB), holding frames and
// zeros after the last one; the writer writes those zeros 64 KiB ahead of
// its frames, so that an fdatasync seldom has extents of the file to
// commit (Journal.zeroAhead). A frame is what one write wrote (one write and
// one fdatasync, shared by every writer that joined it): a header (a magic,
// its checksum, the body's length, a sequence number one more than the
// frame before, across segments, and the body's checksum), the body, and a
// trailer. The body is records:
//
//	uint32 CRC-32C of the rest | uint32 payload length | byte type | payload
//
// (journal_record.go). A segment's first frame opens with a record naming
// it (magic "L4XJ", format version, id), then a checkpoint: every group's
// stable values, and the entries of groups whose oldest entry is four
// segments back (copied forward, in one record each, and only when at most
// a quarter of the older segments is still live). The records after are
// entries (a group and a run of consecutive entries, in the log encoding
// of encoding.go), stable values, deleted ranges and deleted groups.
// Because of the checkpoint, replaying from any segment on gives the
// current stable values, so a segment is removed once no group has an
// entry in it or an older one; segments go oldest first, and a removal
// that fails stops the round until the next roll, so the segments on disk
// always follow each other (an open refuses a gap).
//
// The index, where each entry lies and the stable values, is in memory:
// [OpenJournal] rebuilds it by replaying the segments, and the writer that
// synced a frame applies it, parsing the very bytes it wrote, so that a
// replay and a running journal cannot disagree. Entries are read back with
// pread (raft keeps recent ones in its own cache). Segments of format 1
// (records without frames, before this one) are still read, with that
// format's rules; the journal then goes on in a new segment.
//
// # What survives a crash
//
// The promises, each tested (journal_faults_test.go, and the crash and
// corruption model of journal_model_test.go and journal_model_kill_test.go:
// power cuts at random points in memory and kill -9 of a writing child on
// real files, torn writes, lost directory changes, flipped bits and zeroed
// sectors, checked against raft's InmemStore):
//
//   - Acknowledged means synced. Every write (StoreLogs, DeleteRange, Set,
//     SetUint64, DeleteGroup) returns once its frame is written and
//     fdatasynced; a segment is preallocated, synced and its directory
//     synced before anything is written to it. Each writer gets its own
//     frame's result: a frame that failed fails every writer in it, whatever
//     later frames do.
//   - A torn write is cut. A crash can leave the last frame of the last
//     segment cut short: some of its 512-byte sectors written, the others
//     still zeros. Nothing in it was acknowledged, so the open cuts it off,
//     zeroes it and logs it, and the journal goes on from there.
//   - Damage is refused, never dropped. Bad bytes followed by a valid frame,
//     bad bytes in a segment before the last, non-zero bytes after an older
//     segment's last frame, a sequence number out of order (a lost frame),
//     or a last frame that does not check although every sector of it was
//     written (bit rot, not a tear): the open fails with [ErrCorrupt]
//     rather than forget acknowledged writes. The one case no journal can
//     tell apart is a last frame damaged exactly as a tear would leave it
//     (a sector of it zeroed, or a payload with a whole sector of zeros
//     that a flip elsewhere damaged): it is cut as torn.
//   - A segment that reads back shorter than the size the file system
//     gives for it fails the open with [ErrStorage] (wrapping
//     io.ErrUnexpectedEOF), in any segment: what the read left out is
//     never taken for the zeros of preallocated space.
//   - After a failed write or sync the journal refuses every later write:
//     what the page cache holds can no longer be trusted. The next open
//     writes the last frame again from what it read and syncs it before it
//     appends, so a frame that only the page cache held becomes durable
//     instead of leaving acknowledged frames after a hole.
//   - A full disk does not stop raft. The journal keeps its next segment
//     made ahead (a spare, renamed into place at a roll), so a roll needs
//     no new space. When the spare cannot be made, it refuses new log
//     entries ([ErrNoSpace]) while its segment keeps room for what raft
//     must write whatever happens (terms and votes: raft panics when it
//     cannot save a term; deleted ranges), tries again at most once a
//     second, and takes entries again once space is freed.
//   - One process at a time: [OpenJournal] locks the directory before it
//     reads or writes anything, and a second open fails with [ErrLocked]
//     naming the process that holds it.
//
// An append must follow its group's log (the first entry within
// [first, last+1], or any entry on an empty log): StoreLogs refuses one
// past the end, since it means a write before it was lost, instead of
// taking it for a new log. [TrimLogBehindSnapshot] empties a log that a
// crash left ending before its snapshot, which raft would otherwise append
// after. JournalOptions.NoSync turns the syncs off, for tests and
// benchmarks only.
//
// # Errors
//
// Errors returned by this package wrap one of the "raftlog: ..." sentinel
// errors and can be tested with errors.Is. Two deliberate exceptions follow
// what hashicorp/raft compares by identity or by message:
// JournalGroup.GetLog returns raft.ErrLogNotFound itself (raft compares it
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
// and errors. Once the node stops on purpose ([Mux.MarkStopping]), Raft's
// warnings and errors about a peer (it cannot reach one, a peer has a newer
// term) go at info: when the whole cluster stops, every node's groups
// outlive some of their peers' for a second or so, and those lines are not
// failures. The transport keeps a null logger: raft's NetworkTransport
// logs every connection closed under it (a replica stopped, a peer gone) as
// an error.
//
// # Multiplexed transport
//
// A node hosts many groups (its shard replicas and possibly a member of the
// control group) but listens on ONE TCP port for all of their Raft traffic,
// the rqlite tcp/mux way. [Mux] owns the listener. Each group registers with
// [Mux.Layer] and gets a raft.StreamLayer, on which hashicorp/raft's
// NetworkTransport runs for votes, snapshots and TimeoutNow, with pooled
// connections ([NewTransport] does both steps and adds the append stream
// below). Pipelined AppendEntries are turned off:
// raft 1.7.2 can hang in Shutdown on a stuck pipeline (raft#612), and one
// large group-committed entry in flight per shard leaves nothing to gain. Every group on a
// node has the same address, the Mux's advertised address, and groups are
// told apart by the connection header alone.
//
// AppendEntries, heartbeats included, do not take the NetworkTransport's
// connections: they go over the append stream (appendstream.go), ONE
// connection from a node to each peer shared by all of its groups, in a
// compact binary encoding (appendcodec.go, canonical and fuzzed like the
// log encoding) instead of msgpack. Calls carry an id, so every group's
// AppendEntries to the peer are in flight at once, and frames queued
// together, of several groups, go out in one write. The accepting side
// hands each request to its group's Raft in a goroutine of its own, so a
// group whose Raft is busy (writing its log) holds up no other group, and
// writes each answer when it is ready. A call unanswered within the
// transport's timeout closes the stream; the next call dials a new one. A
// peer that closes the stream instead of acknowledging its header is a
// build without it: its AppendEntries go over NetworkTransport for the
// next 10 s, then the stream is tried again, so a rolling upgrade keeps
// replicating. Votes, snapshots and TimeoutNow stay on the group's
// NetworkTransport.
//
// Heartbeats, on either way in, go to raft's main loop like every other
// RPC: [Transport.SetHeartbeatHandler] declines raft's fast path, which
// raises the term beside the main loop and let a leader resuming from a
// stop append an entry under its successor's term (hashicorp/raft#695),
// diverging its log from the others' without a trace.
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
// With MuxConfig.TLSServer and TLSClient, every connection is mutual TLS:
// the handshake runs before the header is read (within HeaderTimeout), so
// only a peer with a certificate the node trusts reaches a group. Without
// them the advertised address in a header is taken on trust, and anyone
// who can reach the port can speak Raft to any group: keep the Raft
// listener on a trusted network.
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
