// Package keyspace is the deterministic heart of L4XG Grid: the record state
// machine of docs/design.md section 2, the hot table that holds records,
// expiry by stamped time, entity versions, the command encoding of Raft log
// entries and the snapshot format. The rules a client computes too (digests,
// slots, the token layout, the wire limits and their validators) are in
// package digest, which keyspace builds on.
//
// # Determinism
//
// Nothing here reads a clock, does I/O or starts a goroutine. Time enters
// only as the stamp the leader writes into each Entry; the Machine evaluates
// every deadline against max(previous stamp, entry stamp), so time never runs
// backwards and every replica that applies the same entries at the same
// indexes computes the same results and state. Fencing tokens are derived
// from the Raft index and the command's position in its entry, shifted to
// make room for the shard id in the low bits (digest.TokenLayout:
// (index<<16 | position) << bits | shard, bits from the grid's shard
// count, written by the leader into each entry), so they increase strictly
// per shard with no extra storage, across leader changes and restarts, and
// a token names the shard that granted it. The rules an entry is applied by
// are those its encoding version says (Entry.HasLayout), never the
// applying binary's: a replica replaying old entries after an upgrade ends
// where the replicas that applied them first did.
//
// # Records and memory
//
// A key is stored only as its 128-bit digest (FarmHash Fingerprint128 of
// namespace ‖ 0x00 ‖ key). The hot Table keeps a fixed 40-byte slot per
// record (digest, token, deadline, packed state/flags/attempts/aux) in
// open-addressing segments: no Go map of pointers and no allocation per key.
// Fingerprints, stored results, and the entity reference and request id of
// an in-flight reserve live in side maps keyed by digest, flagged in the
// record, so keys without them pay nothing.
//
// # Leases
//
// A Reserve may carry a request id (as RequestIDHash, 8 bytes), the same
// across the resends of one logical call. The PROCESSING record keeps it
// until it leaves PROCESSING by any way (settled, released, forgotten, taken
// over, poisoned, reclaimed). A Reserve that finds a lease in force
// (deadline > now) keeping its own request id answers that grant again:
// ACQUIRED with the same token, deadline and attempt, Result.Replayed set,
// nothing changed. This comes before the STALE check (the grant passed it
// when it was made); a differing fingerprint is another message and goes on
// to MISMATCH. These are the client sessions of the Raft dissertation,
// section 6.3, scoped to one lease: a resend never finds itself BUSY.
//
// Extend sets the deadline to max(deadline, now + lease): it never shortens
// a lease, and its answer carries the lease's real deadline.
//
// A lease's token goes to its holder only: BUSY, LEASE_LOST, MISMATCH and
// STALE answers carry none, and neither does Get unless the caller asks for
// the operator view (Get's showToken, Command.ShowToken for a read in log
// order). A Reserve that finds a settled record (DUPLICATE, POISONED) gets
// that record's token: it no longer fences any work in flight.
//
// # Entities
//
// An entity (an order id) carries a committed version, raised by Complete.
// A Reserve naming the entity with a version at or below it is STALE. So the
// check and the raise are atomic with the key's own record, a key reserved
// with an entity has its slot bits taken from the entity (digest.Record): all
// keys of an entity live on the entity's shard. Get and Forget of such a key
// must name the same entity. Settles need not: their token names the shard
// (the API routes by it), and inside the shard a settle whose digest does
// not hold its token finds the key's record under other slot bits (held.go),
// so Complete commits the entity's version either way. A settle says
// whether it found a record of its key (Result.Found): one that found none
// changed nothing, and the API asks the key's own shard.
//
// # Expiry
//
// COMPLETED and POISONED records past their retention read as ABSENT at once;
// PROCESSING and FAILED records past their deadline keep their attempt count
// (a crashed holder counts as a failed attempt) until AbandonAfter. Memory is
// reclaimed lazily on access and by a bounded sweep in each Tick entry.
//
// # Tiers
//
// A Machine may be given a ColdTier (tiering/ implements it on Pebble). The
// Tick sweep then also moves settled records past the hot window of the
// TierPolicy — or any settled record while the hot tier is over the policy's
// budget — to the cold tier, with their fingerprint and result, and purges a
// bounded number of cold records past their retention. Lookups that miss the
// hot table fall through to the cold tier; a digest is never in both. The
// leader writes its policy into every tick entry, so every replica demotes
// the same records at the same index, and the cold tier's contents are a
// function of the log like the rest of the state. The only cold record an
// operation can change is one it removes (Forget, or a record found past its
// retention): settled records are never written again.
//
// # Snapshots
//
// Snapshot is O(segments + side map parts): the table's segments and the
// side maps' parts are shared copy-on-write, and the first write to a shared
// one copies that one alone. The cold tier's owner snapshots it beside.
package keyspace
