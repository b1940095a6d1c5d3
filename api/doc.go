// Package api is the gRPC face of a node: the Grid service (Reserve,
// Complete, Fail, Release, Extend, Get, Forget, Batch, Status), gRPC health
// and reflection, the request limits of DESIGN section 7, and the one place
// where keyspace and shard errors become gRPC status codes (errors.go):
// invalid input is InvalidArgument with a message naming the limit, a batch
// over 1000 operations or a result over 64 KiB is ResourceExhausted (as is a
// request over 4 MiB, refused by gRPC itself), a shard without a serving
// leader or a node shutting down is Unavailable.
//
// Outcomes (ACQUIRED, BUSY, DUPLICATE, LEASE_LOST, ...) are answers, not
// errors: they travel in OpResult. Defaults (lease 30 s, retention 7 days,
// 5 attempts) are filled here, before proposing, so every replica applies
// explicit values.
//
// A Batch validates each operation on its own (a bad key fails only its own
// operation) and proposes the operations of each shard, linearizable reads
// included, as one group-committed proposal, in batch order, the shards in
// parallel; stale reads are answered locally afterwards.
package api
