// Package cluster turns a set of gridnode processes into one grid: it
// knows who is out there (gossip), decides where every shard replica lives
// (the control group and its planner), and publishes that decision as the
// cluster map that nodes and clients route by.
//
// It is three packages. The state is package cluster/topology: the Map and
// its nodes, the control commands and their encoding, Apply (the map after
// a command), the placement planner (Plan, PlanControl), moves, the grace
// period of down nodes and the gossiped NodeMeta. It is pure: no clock, no
// I/O, no Raft, no gossip, and it is tested as data. Package cluster/gossip
// is the membership over hashicorp/memberlist: who is alive, left or dead,
// behind a guard transport that refuses the frames memberlist would crash
// on, with encryption, keyring rotation and healing after partitions (its
// doc.go). This package is the runtime around both, Runtime: the
// controller (the node's member of the control group, with Control, its
// Raft FSM adapter; controller.go, bootstrap.go), the replica loop
// (replicas.go, ready.go), and the control leader's reconciler and move
// executor (reconcile.go, execute.go).
//
// # Membership: gossip informs, it never decides
//
// The gossip view is only an input: a partitioned minority sees the
// majority "dead", and if that view could move shards, both sides would.
// So no replica moves, no node is drained and no node is removed on gossip
// alone. Those decisions are commands in the control group's Raft log,
// proposed by its leader, and a leader needs a majority of the control
// voters; a minority side cannot commit anything. Gossip events only wake
// the runtime's loops to look again.
//
// # Clock offsets
//
// The node also measures its clock against its peers' over gossip
// (clockoffset.go): ClockOffsets is a gossip.ClockProbe, so every ack of a
// memberlist ping carries the acking node's clock (the one that stamps its
// shard entries), and the pinging node estimates the peer's offset as
// peerTime - (localNow - rtt/2), within rtt/2. The node's offset is the
// median of its peers' recent estimates; it is outside the maximum offset
// when more than half of the peers it knows are recently measured beyond
// it by more than their uncertainty, inside when at least half are
// measured within it by more than their uncertainty, and otherwise keeps
// its last verdict (an estimate gone stale under load does not hand the
// majority to the peer measured last, and a ping slowed past the bound's
// slack moves the verdict neither way). The node's shards take that
// verdict as their shard.PeerClocks: outside, they grant no lease and hand
// their leaderships over, and the control leader does not move a
// leadership back to a node whose Status says it is outside
// (restoreLeaders). ClockOffsets lives here rather than in package gossip
// because it is the shards' PeerClocks: gossip carries its bytes and
// imports nothing of the shards.
//
// # Full disks
//
// A node whose disk is below its reserve refuses new keys
// (shard.Host.DiskFull). Its runtime gossips so (disks.go, the metadata
// flag topology.MetaDiskFull) and keeps what the others gossip in
// DiskStates, the shards' PeerDisks: a shard leader on a full node hands
// its leadership to a voter not known to be full as soon as its node
// refuses one of the shard's new keys (or at its next tick), and the
// control leader moves no leadership back to a node whose own Status
// calls its disk full (restoreLeaders, handBack), so a full disk stops
// no shard's new keys for long while another voter has room.
//
// # The control group and the map
//
// A small Raft group (5 voters from 5 active nodes, 3 for 3 or 4, 1 below:
// see Placement) holds the Map: the nodes with their addresses, state
// (active, draining, removed) and incarnation, the replica set of every
// shard with its preferred leader first and its generation (how many
// times the set changed since the shard was created), leader hints for
// routing, and an epoch bumped by every change. Slot and shard counts are hard settings fixed at
// bootstrap; a slot maps to shard slot*shards/slots, the same contiguous
// ranges as a single node (digest.SlotShard).
//
// Control is the group's FSM, a thin adapter over topology.Apply, which
// applies versioned commands (bootstrap,
// node join or update, drain, remove, apply move, set leader hint) to a
// copy of the map, validates the result and swaps it in: a command either
// produces a valid map with a new epoch or is rejected and changes
// nothing. It is deterministic and reads no clock; a committed entry it
// cannot decode halts it rather than let voters diverge. Snapshots carry
// the map in its canonical encoding, and Restore decodes into fresh state
// before swapping.
//
// # Replicas follow the current map
//
// The control group snapshots only every 1024 entries, so a restarting
// node re-applies the control log and its map walks through history. Each
// node's replica loop therefore acts only on a current map: one whose
// epoch has reached the current epoch the control leader reports now (a
// read-index over the ClusterMap RPC; the leader's own map once it has
// applied a barrier in its term) and the epoch the node last acted on,
// which it keeps in the control group's stable store. A follower's own
// commit index proves nothing here: catching up, it takes min(leader's
// commit, last index received), which its applied index equals between
// batches. While its map is not current a node starts and stops nothing;
// at start it resumes every replica it has state for.
//
// Shard groups are created once, by the bootstrap map, which carries the
// first replica sets (as the planner places them on the empty cluster):
// each of those replicas bootstraps its group with exactly that set, and
// only while the shard is at generation 0 and the node is the incarnation
// the map knows. Any later replica starts empty and waits for the group's
// leader to add it. A replica the current map no longer lists is purged
// (stopped, its Raft log, term and vote deleted) only once the shard's
// leader reports a committed configuration without it.
//
// A node is ready (/readyz) when its map is current, it is in the map and
// not removed, and each replica the map gives it is a voter of its group
// within 64 entries of its leader's commit index (asked of the leader). A
// non-voter still copying the log is not ready. The replica loop computes
// this and caches it.
//
// # Draining, removal and coming back
//
// Drain refuses to drain an active node when the other active nodes are
// fewer than the replica count (every shard it holds would run
// under-replicated) unless forced. A drained node is removed from the map
// and the control group; it keeps running, says it is removed and is not
// ready. Started again on the same data directory it stays removed. A data
// directory takes a random incarnation at its first start: a node that
// comes back under a removed id with a wiped directory gossips a new one
// and is admitted again, active and empty. A node still in the map that
// comes back wiped is not admitted (its replicas' state is gone): it hosts
// nothing until it is drained, then it is admitted afresh.
//
// # Placement
//
// PlanGroups is a pure function of the map, the gossip view (alive, see
// gossip.AliveSet), deadFor, which says whether a node has been missing
// longer than the grace period (default 30 s), and each shard's observed
// group: its committed Raft configuration (voters and non-voters) as its
// leader reports it, or unknown when no leader answered or its
// configuration is not committed. The control leader answers deadFor
// with a Grace fed by gossip and its own clock; a new control leader
// starts with a fresh Grace, which can only delay a replacement.
//
// It repairs before it balances. A shard whose map set and group differ
// (a move cut short by a new control leader, the move timeout, or a node
// lost during its catch-up) is set right first: a surplus replica the
// group does not count as a voter is dropped before any real member; a map
// member that is not a voter is added again (non-voter, catch up, voter)
// while it is eligible, and dropped from the map otherwise; a group member
// the map does not list is removed from the group, but never so that the
// group keeps no majority of live voters. A shard whose group is unknown,
// or whose live voters are no majority, is left alone: its group has no
// leader to change its configuration, and bringing it back is an
// operator's decision (or takes its nodes coming back).
//
// Then the placement. Nothing moves while a node is merely unresponsive:
// within the grace period its replicas stay and it just receives none.
// Past it, its replicas are replaced. A draining node loses all its
// replicas, a joining node takes its share until replica counts per node
// differ by at most one, and preferred leaderships are spread the same way
// over voters. Only replicas that must move do, and ties are broken by
// node id, so every voter that became leader would make the same plan.
// Plan is PlanGroups for groups that match the map (a new cluster's
// creation sets).
//
// The control group's own membership is planned the same way, by the pure
// PlanControl: every node of the map that is not removed is a member
// (non-voters receive the map); alive active non-voters are promoted until
// the group has 5 voters from 5 active nodes up, 3 for 3 or 4, 1 below; a
// voter dead past the grace period leaves only once replaced, never below
// 3 voters and never so that the group keeps no majority of live voters
// (a gossip view that sees everyone dead cannot shrink the group to its
// leader); removed nodes leave. The leader executes the changes and logs
// each at info.
//
// # Executing a move
//
// Each round of the control leader is fenced by the control term it runs
// in: the round ends as soon as its node stops leading or the term
// changes (checked every 50 ms and before every request), and every shard
// admin request carries Fence{ControlTerm, Epoch}, which a node that knows
// a later term refuses with ErrStaleFence, which stops the round as well.
// Map proposals of a deposed leader fail in Raft. So two control leaders
// never change one shard's group at once for long, and what a stopped
// round leaves half done the next one repairs from the observed groups.
//
// A round observes the groups (asking each shard's replicas, up to eight
// shards at once, which of them leads, and that leader for its
// configuration), plans, and executes at most one move per shard at a
// time (up to four shards at once, each bounded by 60 s), add before
// remove, so a shard never serves from fewer replicas than it did or than
// its target:
//
//  1. commit {Shard, Add} to the map: the new node sees the map and starts
//     an empty replica of the shard (a shard with no replica left is not
//     given one: groups are created only with the cluster);
//  2. add the new replica to the shard's Raft group and wait until it has
//     caught up with the leader's log (AddNonvoter, then AddVoter once
//     caught up, so commits never wait on a replica still copying a
//     snapshot);
//  3. if Remove leads the shard, transfer leadership to the move's Leader;
//     RemoveServer(Remove);
//  4. commit {Shard, Remove, Leader}: the old node, once the shard's
//     leader reports the removal committed, stops its replica and deletes
//     its data.
//
// A rejoin is steps 2 alone (the map lists the node already), an eviction
// step 3 alone (the map no longer lists it). Leader-only moves commit the
// new preferred leader, then transfer leadership to it. A leadership goes
// only to a replica that has applied its leader's commit to within a
// ready replica's lag (caughtUp): a move waits for that, at most
// catchUpWait, and the periodic hand-back to preferred leaders
// (restoreLeaders) skips the shard until then. The planner never
// removes a shard's last replica. The shard group's own Raft configuration
// is what serves; the map follows it, one committed step at a time, and
// where the two part the next plan brings them together again.
package cluster
