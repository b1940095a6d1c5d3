// Package shard runs the Raft groups of a node. A Shard is one replica of one
// group: hashicorp/raft with a thin BatchingFSM adapter over the keyspace
// Machine, a proposer that coalesces concurrent commands into few log entries
// (group commit) and stamps each with the leader's time, the leader's idle
// tick, and linearizable reads. A Host is the set of shards on a node and the
// slot map that routes a digest to its shard.
//
// # Writes
//
// Propose queues commands. While up to MaxInflight entries travel through
// Raft, new commands wait; the next entry takes all of them (up to
// MaxEntryCommands). Each entry is stamped with max(previous stamp, leader
// clock, latest applied stamp), so stamped time never runs backwards across
// leader changes. Results come back from the FSM through the apply future,
// in log order. A proposal is acknowledged only once its entry is committed
// (fsynced by a majority) and applied.
//
// # Reads
//
// Get without staleOK goes through the log as a read-only command, batched
// with the writes, and is evaluated at its entry's stamp: linearizable by
// construction, with no separate ReadIndex machinery. (hashicorp/raft marks
// an index applied when it hands it to the FSM, not when the FSM is done, so
// a ReadIndex wait would need its own bookkeeping; reads are not the hot
// path, so we chose the simpler safe design.) A stale read answers from the
// local replica at its latest applied stamp.
//
// # Time
//
// The leader sends a tick entry every TickInterval; ticks carry time forward
// on idle shards, carry the leader's tiering policy (hot window, hot budget)
// and let the Machine reclaim expired records, demote settled ones to the
// cold tier and purge cold ones. Replicas never expire or demote anything by
// their own clocks. A shard holding no record in either tier skips its ticks.
//
// # Cold tier
//
// Each shard's cold tier is a tiering.Shard in the node's cold Pebble. It is
// derived state: Open wipes it, and Raft rebuilds it from the snapshot (which
// carries both tiers: the machine's copy-on-write snapshot, then a Pebble
// snapshot of the cold records, both taken in O(1) under the FSM lock and
// written out by Persist while applies go on) and the log after it. Persist
// also leaves the snapshot's cold records beside it as sstables (with a
// manifest tied to the snapshot by a nonce), so a restart ingests those files
// instead of rewriting every cold record from the stream; a replica that got
// the snapshot from its leader, or whose files are missing or damaged, reads
// the stream. The FSM
// flushes the machine's cold writes at the end of every applied batch, under
// its lock; a failing write is retried until it succeeds, so the state never
// moves on without it, and the failure shows in ColdHealth (and /readyz).
//
// # Storage
//
// All shards of a node share one raftlog.Store (one Pebble, one WAL), each
// under its own key prefix; snapshots go to a file snapshot store per shard.
// Hard settings (digest function, slot count, shard count) are written to the
// data directory at creation and checked at every start. The shard count
// also fixes each shard's token layout (keyspace.NewTokenLayout of its id
// and the count): the leader writes it into every entry it proposes, so
// each token names its shard, and every replica, replaying or not, grants
// the tokens the log says.
//
// # Hosting
//
// A node alone hosts every shard as a one-voter group on an in-memory
// transport. With a raftlog.Mux every group runs over the network (group id
// = shard id): with static Peers every node hosts every shard; in Manual
// mode the host holds only the replicas the cluster runtime starts
// (StartReplica: a new group, or an empty replica that waits for a leader
// to add it) and stops (StopReplica, with purge once the replica is out of
// its group: log, snapshots and cold records go, and a marker file lets
// the next start finish a purge cut short by a crash). For may then return
// nil: the shard lives elsewhere. The group's leader changes membership
// (AddNonvoter, AddVoter, RemoveServer, TransferLeadership), each
// reporting success only once the change is committed: a change the
// leader's latest configuration already shows (a retry) is confirmed by a
// barrier the leader commits after it, never taken from the uncommitted
// configuration. A replica moves by joining as a non-voter, catching up,
// being promoted, and the replica it replaces being removed. Raft traffic
// runs without pipelined AppendEntries (see raftlog.NewTransport). A replica stopping with its node
// (Close, StopReplica without purge) hands leadership over first; a purged
// one does not.
//
// Status carries each replica's view of its group (GroupView): the latest
// configuration it has, this replica's suffrage in it, the configuration's
// log index and whether that index is committed, and how long ago it heard
// from its leader. hashicorp/raft 1.7.2 does not expose a configuration's
// index (GetConfiguration's Index is always 0), so the FSM records the
// configuration entries it applies and the configuration of each snapshot
// it restores; a newer configuration not applied yet is found by reading
// the end of the log back, at most configScanLimit entries.
package shard
