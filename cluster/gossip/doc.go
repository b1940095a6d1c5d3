// Package gossip is a node's view of who is out there: Membership wraps
// hashicorp/memberlist, gossips the node's metadata and reports members
// alive, left or dead. It decides nothing: package cluster reads the view
// and proposes every change through the control group's Raft log.
//
// # Gossip informs, it never decides
//
// Each node gossips a small, versioned topology.NodeMeta (its id, its gRPC,
// Raft and HTTP addresses, and the incarnation of its data directory, with
// a flag while its disk is below its reserve: SetDiskFull) and learns who
// is alive, who left and who is dead. Gossip is only an input:
// a partitioned minority sees the majority "dead", and if that view could
// move shards, both sides would. Members is the state; the events given to
// Config.OnEvent, one at a time from a goroutine that holds no gossip
// lock, are hints to look again. AliveSet turns the view into the planners'
// alive argument.
//
// memberlist v0.5.4 is used because v0.7.0 pulls in a go-metrics that does
// not build beside hashicorp/raft v1.7.2 (v0.6.0 builds, but bounds only
// the push/pull header). It reports no suspicion events and does not tell
// a departure from a death, so Leave first gossips a leaving flag in the
// metadata; members are alive, left or dead.
//
// # The guard transport
//
// memberlist v0.5.4 trusts lengths and version lists from the wire: a
// push/pull header with Nodes -1, a user message of 1<<62 bytes, a node
// state or an alive packet with three protocol versions each panic one of
// its goroutines, which kills the process. Membership therefore runs it on
// a guard transport (transport.go) around its NetTransport: every UDP
// packet and the first message of every TCP stream, accepted or dialed, is
// checked against bounds (frame.go) before memberlist decodes it, through
// the label, compression and checksum wrappers as memberlist walks them; a
// refused one is dropped or its stream closed, logged at warn and counted
// (RefusedFrames). The checks are fuzzed (frame_fuzz_test.go) against a
// replay of what memberlist does with what they pass.
//
// With gossip encryption on (Encryption, a keyring from --gossip-key-file),
// an encrypted packet or stream is decrypted with the keyring (crypto.go)
// and its plaintext checked the same way, so a member holding the key
// cannot send what memberlist panics on either; a plaintext one is refused
// while incoming messages are verified. With encryption off an encrypted
// one is refused. The keyring can be listed and rotated at run time
// (Keyring, SetKeys); with Config.KeyringFile each change is written
// durably and read back at the next Start (keyring.go).
//
// The same transport injects the partitions of tests (Faults): packets
// dropped and stream dials refused per peer, or every peer cut at once.
//
// # Healing after a partition
//
// memberlist never contacts a member it has declared dead, so after a
// partition both sides would stay split for good. Membership rejoins by
// itself, as Consul's retry-join and serf's reconnect do (reconnect.go):
// while any known member is not alive, every ReconnectInterval (3 s,
// jittered) it joins up to three of the dead members (not those that left)
// and the seeds (Config.Seeds). The push/pull of a join carries both
// views: a member that finds itself dead refutes it with a higher
// incarnation, which the next round carries back, so a pair heals even
// while its UDP path stays broken (memberlist then logs "was able to
// connect over TCP but UDP probes failed", and its probes pass through
// their TCP fallback).
//
// # Riding on the pings
//
// A ClockProbe given in Config.Clocks rides on the failure detector: every
// ack of a memberlist ping carries its AckPayload, and the pinging node
// hands the payload and the ping's round trip to Observe. The acks are UDP
// packets, which the guard passes to memberlist unchanged (only the TCP
// fallback's ack carries no payload, and memberlist reports no estimate for
// it). What the payload means is the probe's business: package cluster's
// ClockOffsets measures clock offsets with it.
//
// # Locking
//
// memberlist calls the delegates (delegate.go) with its own locks held;
// they only record and queue, never call back into memberlist and never
// block. Nothing calls into memberlist while holding the Membership's
// lock, and Start and Shutdown exclude every other call into it, so none
// meets a half-started or shut-down memberlist. No state is global: each
// Membership owns its memberlist, transport and keyring.
package gossip
