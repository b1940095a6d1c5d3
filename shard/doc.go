// Package shard runs the Raft groups of a node. A Replica is one replica of one
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
// local replica at its latest applied stamp. Neither shows the record's
// token unless ReadOptions.ShowToken asks for the operator view (the rule
// is keyspace.Machine.Get's; a linearizable read carries the flag in its
// command).
//
// # Time
//
// The leader sends a tick entry every TickInterval; ticks carry time forward
// on idle shards, carry the leader's tiering policy (hot window, hot budget)
// and let the Machine reclaim expired records, demote settled ones to the
// cold tier and purge cold ones. Replicas never expire or demote anything by
// their own clocks. A shard holding no record in either tier skips its ticks.
//
// # Clocks and leases
//
// Leases rely on the nodes' clocks agreeing within a maximum offset ε
// (Config.MaxClockOffset, gridnode serve --max-clock-offset, default
// digest.DefaultMaxClockOffset = 250 ms; the model is CockroachDB's
// --max-offset). Three rules enforce it on the leader:
//
//   - A lease is granted or renewed (an entry carrying a Reserve or an
//     Extend) only at a stamp that is the leader's own clock reading.
//     When the leader's clock is behind the stamps (the latest applied
//     stamp, or its own last one) by at most ε, as after a hand-over to a
//     node whose clock is a few milliseconds behind the previous
//     leader's, the entry waits for the clock to reach them, at most ε
//     (l4xg_grid_clock_lease_waits_total). Behind by more, or not there
//     within ε, the requests carrying those commands are refused with
//     ErrClockOffset (which also matches ErrNotLeader: nothing was
//     applied, the API answers with a Redirect) naming the lag; this is
//     the frozen-stamp case, a leader far behind whose stamps would all
//     equal the previous ones, so that a lease granted there would end
//     already in the past by real time.
//   - A node whose clock is outside ε of a majority of the peers it has
//     measured (PeerClocks, measured over gossip by cluster.ClockOffsets)
//     grants no lease either, and its clock stamps nothing: its entries
//     are stamped max(previous stamp, latest applied stamp), so that a
//     clock running ahead cannot carry the shard's time past the others'.
//   - A leader under either refusal sends no tick and, at every tick
//     (one tick after it gained the leadership at the earliest, so that
//     leaderships move at most once a tick when no majority of clocks
//     agrees), hands its leadership to a voter that can grant: any other
//     voter when its node is the one outside the bound; when its clock is
//     behind the stamps, the voter measured the most ahead of it among
//     those within the bound of its own clock, if that one is within the
//     bound of the stamps. Other commands (Complete, Fail, Release,
//     Forget, Get) are served meanwhile: they grant nothing, settles are
//     idempotent, and a holder can still settle while the leadership
//     moves. A request mixing them with a Reserve or an Extend (one Batch
//     group) is refused whole.
//
// What the lease then survives. Let real time be t and node i's clock
// C_i(t) = t + e_i(t). Assume |e_i(t) - e_j(t)| <= ε for every pair of
// nodes that grant leases, at all times. A holder sends its Reserve (or
// Extend) at t_s, the leader stamps it at t_p >= t_s with s = C_L(t_p)
// (first rule), so the lease's deadline is D = s + lease. The holder
// treats the lease as valid until local start + lease - margin, that is
// until about t_s + lease - margin (its clock only measures a duration).
// A second holder can be granted the key only by an entry whose stamp is
// s2 >= D, made at t2 by a leader L2 with s2 = C_L2(t2). So
// t2 = s2 - e_L2(t2) >= t_p + lease + e_L(t_p) - e_L2(t2)
// >= t_s + lease - ε, and no two holders overlap as long as
//
//	margin >= ε   (plus the clocks' drift over one lease: ρ·lease for a rate error ρ)
//
// The bound holds whoever led in between, for a fast leader as for a
// slow one: a leader ahead of the others by up to ε grants a lease whose
// deadline is late by its offset (the holder stops early, which is safe)
// and ends others' leases early by up to its offset (the margin covers
// it); a leader behind by up to ε is the mirror case. Stamps above a
// granting leader's clock (a frozen floor, made by a clock that was
// ahead) never become a lease's start: the first rule waits them out or
// refuses, so a clock that ran ahead by δ > ε and stamped before it was
// caught delays grants (the shard grants no lease until the others'
// clocks are within ε of its stamps, δ - ε later:
// l4xg_grid_clock_shards_behind_stamps shows it) but cannot make two
// holders overlap among leaders that are within the bound; that wait is
// the price of never cutting short a lease whose holder still runs. Without the first rule the frozen floor would need a
// margin of ε plus the floor's lead (unbounded: the one-hour-slow leader
// of issue 11 granted leases already over by real time). What the lease
// does not survive: granting leaders more than ε apart, that is two nodes
// out of bound while neither has measured it yet (a node measures each
// peer every gossip probe round, and the check needs more than half of
// the peers it knows measured beyond the bound), or a holder whose margin is below ε. Fencing tokens
// still refuse the superseded holder's settles in every case.
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
// All shards of a node share one raftlog.Journal (one sequence of segment
// files, one fdatasync for the writes of all shards that arrive together);
// snapshots go to a file snapshot store per shard. Raft snapshots at
// random 2-4 min after a start; a replica that starts with a log tail of
// at least raft's SnapshotThreshold also snapshots once it has applied it
// (compactAfterReplay), so a node restarted more often than that does not
// replay its whole log at every start; and a replica snapshots whenever it
// has spent Config.SnapshotTail (default 2 s) applying entries since its
// last snapshot, or as long as that snapshot took to write if longer
// (boundTail), so that what a crash leaves to replay stays about that
// long whatever the load: raft's timer counts neither the load nor the
// work in the entries (one node wrote 5.5 M commands in 195 s without a
// snapshot, and its restart took 17 s).
// Hard settings (digest function, slot count, shard count) are written to the
// data directory at creation and checked at every start. The shard count
// also fixes each shard's token layout (digest.NewTokenLayout of its id
// and the count): the leader writes it into every entry it proposes, so
// each token names its shard, and every replica, replaying or not, grants
// the tokens the log says.
//
// # Hosting
//
// A Host has one mode: OpenHost opens the node's storage and starts no
// replica; its owner starts the replicas it hosts (StartReplica: a new
// group with this node as its only voter, or an empty replica that waits
// for a leader to add it; BootstrapReplica: a new group with given
// voters) and stops them (StopReplica, with purge once the replica is out
// of its group: log, snapshots and cold records go, and a marker file lets
// the next start finish a purge cut short by a crash). A standalone node
// (the node package) starts every shard, each a one-voter group on an
// in-memory transport. In a cluster every group runs over a raftlog.Mux
// (group id = shard id) and the cluster runtime starts the replicas the
// map gives the node; For then returns nil for a shard that lives
// elsewhere. The group's leader changes membership
// (AddNonvoter, AddVoter, RemoveServer, TransferLeadership), each
// reporting success only once the change is committed: a change the
// leader's latest configuration already shows (a retry) is confirmed by a
// barrier the leader commits after it, never taken from the uncommitted
// configuration. A replica moves by joining as a non-voter, catching up,
// being promoted, and the replica it replaces being removed. Raft traffic
// runs without pipelined AppendEntries (see raftlog.NewTransport). A replica stopping with its node
// (Close, StopReplica without purge) hands leadership over first, to a
// voter not known to be full nor outside the clock bound when some are and
// some are not (fitVoters); a purged one does not. A leader whose node's disk is below its reserve
// (Config.DiskFull), where its node refuses new keys, hands its leadership
// to a voter whose node is not known to be full (Config.PeerDisks): as
// soon as its node refuses one of the shard's new keys (DiskRefused),
// right after its barrier when elected so, and at every tick; it keeps the
// leadership while no voter has room (handOverForDisk).
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
