// Package api is the gRPC service of a node: the Grid service (Reserve,
// Complete, Fail, Release, Extend, Get, Forget, Batch, Status, Audit, and for
// clusters ClusterMap, Drain, ShardAdmin), gRPC health and reflection, the
// request limits of docs/design.md section 7, and the one place where
// keyspace, shard and cluster errors become gRPC status codes (errors.go):
// invalid input is InvalidArgument with a message naming the limit, a batch
// over 1000 operations or a result over 64 KiB is ResourceExhausted (as is a
// request over 4 MiB, refused by gRPC itself), a shard without a serving
// leader or a node shutting down is Unavailable, a leadership transfer to a
// node that is not a voter of the shard's group is FailedPrecondition.
//
// Outcomes (ACQUIRED, BUSY, DUPLICATE, LEASE_LOST, ...) are answers, not
// errors: they travel in OpResult. Defaults (lease 30 s, retention 7 days,
// 5 attempts) are filled here, before proposing, so every replica applies
// explicit values. A Reserve's request_id (at most 64 bytes) enters the log
// as its keyspace.RequestIDHash, computed here once; a Reserve answered
// with the grant its request id already holds says replayed. A Get shows a
// token only with show_token (the keyspace rule, carried to the shard).
//
// Every field a caller fills with a name is bytes on the wire (namespaces,
// and the node ids and Raft addresses of Drain and ShardAdmin; keys and
// entities are arbitrary bytes anyway), so that input which is not UTF-8
// reaches validation and is refused with InvalidArgument naming the rule,
// not by the protobuf decoder with Internal. An error that echoes an input
// quotes at most a short prefix of it (digest.Quote): an error message
// travels in a header, and a client tears down the whole connection over a
// header past its limit.
//
// Every operation takes one way in: a unary call is a batch of one, a
// stream frame is a batch (planned once: validated, digested, grouped by
// shard) whose shards' parts answer as each is done, and a Batch is
// itself. A Batch validates each operation on its own (a bad key fails only its own
// operation) and proposes the operations of each shard, linearizable reads
// included, as one group-committed proposal, in batch order, the shards in
// parallel; stale reads are answered locally afterwards. Its response stays
// within 4 MiB (the request limit, and gRPC's default receive limit):
// stored results are kept in request order while it fits, and later ones
// are left out and marked result_omitted (boundResults), so that a small
// request cannot ask for an answer thousands of times its size.
//
// The package serves; it does not wire: the node package opens the
// listeners, the host and the cluster runtime, and hands the server the
// host, the cluster runtime as a ClusterView (the small interface declared
// here), the Peers pool and the metrics registry (Options).
//
// An operation's shard is its record digest's, but a settle (Complete,
// Fail, Release, Extend) goes first to the shard its token names
// (digest.TokenShard), so it need not name the entity its key was
// reserved with; when that shard holds no record of the key, the node
// that ran it there sends it on to the digest's shard (route.go,
// router.place). The answer is the key record's, wherever it lives.
//
// A standalone node (Options.Cluster nil) holds every shard and serves
// everything itself. A cluster node routes each operation by the cluster
// map (route.go): it runs it on its own replica when that replica leads,
// and otherwise forwards it to the shard's leader (one Batch RPC per leader
// node) or, when the client asks for it with the grid-redirect header,
// refuses it with UNAVAILABLE and a Redirect naming the leader. A Redirect
// always means "not applied, resend it there"; UNAVAILABLE without one means
// the outcome is unknown. Peers (peers.go) pools the connections to the
// other nodes, for forwarding and as the cluster.Remote the control leader
// moves replicas with. ShardAdmin is fenced: a request planned under a
// control term older than the receiving node knows, or under none, is
// refused with FailedPrecondition (topology.ErrStaleFence, which Peers gets
// back through an ErrorInfo detail), so a deposed control leader cannot
// change a shard's group.
//
// Status reports, for each replica, its suffrage and its group's
// configuration as it knows it (with the configuration's index, whether it
// is committed, and the time since it last heard from its leader), and for
// the node its state in the map and its readiness as /readyz reports it,
// and its clock (clock.go): its offset to its peers, the maximum clock
// offset and whether it is within it. A Reserve or Extend that a leader
// refuses under the clock rules (shard.ErrClockOffset) is Unavailable with
// a message naming the rule and the offset; in a cluster it carries a
// Redirect (nothing was applied), as a leader that cannot serve does.
package api
