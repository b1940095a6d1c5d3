// Package client is the Go client of L4XG Grid, the replicated store of
// idempotency keys that sits in front of message consumers (the Idempotent
// Receiver pattern).
//
// # Process: the idempotent receiver in one call
//
// Most consumers need one method. For every message they receive, they call
//
//	out, err := c.Process(ctx, "orders", msgID, handle)
//
// Process reserves the key, runs handle under a processing lease, extends the
// lease in the background while handle runs, and settles the key: COMPLETED
// with handle's result when it succeeds, FAILED (retryable after a backoff) or
// POISONED when it fails. A message seen again is answered from the grid
// without running handle (Processed.Duplicate, with the stored result). The
// errors the consumer routes on are distinct: a *BusyError (ErrBusy) means
// another consumer holds the key right now (redeliver later, or use
// WaitForHolder); ErrLeaseExpired means the lease came too late to trust
// and the handler did not run (redeliver); ErrPoisoned means dead-letter the
// message; ErrStale means ack and drop it; ErrMismatch means the key was
// reused for another payload.
//
// # Broker adapters
//
// The subpackages map Process's outcomes onto a broker: ack, a delayed
// retry, a dead letter. client/rabbitmq consumes a RabbitMQ queue over
// github.com/rabbitmq/amqp091-go, client/jetstream a NATS JetStream
// consumer over github.com/nats-io/nats.go/jetstream, client/kafka a Kafka
// consumer group over github.com/twmb/franz-go/pkg/kgo, client/servicebus
// an Azure Service Bus receiver over its SDK (tested on a fake), client/sqs
// an SQS queue over github.com/aws/aws-sdk-go-v2/service/sqs. Adapters set the message's correlation
// id in the handler's context (CorrelationID). client/sqlfence records a
// handler's effect in the caller's own SQL transaction (PostgreSQL or
// MariaDB), keyed and fenced
// by the token, so that a holder that committed and died before Complete
// is not applied twice.
//
// # The local safe deadline
//
// A lease is only trusted until its local safe deadline: the client's clock
// just before the Reserve's first send, plus the lease the grid's answer
// leaves (its deadline minus the stamp it answered at, both by the grid's
// clock), minus a margin. The margin (WithLeaseMargin) covers the offset
// between the client's clock and the grid's and the grid's own offset
// between nodes; its default, DefaultLeaseMargin, is lease/10 but at least
// the grid's default maximum clock offset (250 ms,
// digest.DefaultMaxClockOffset), and at most lease/2. Leases shorter than
// about twice that offset (500 ms) therefore keep less than the offset as
// margin, and are less well protected against clock skew. A replayed grant
// (a resend that got its own earlier grant back) has less left than the
// lease, and its safe deadline is that much earlier: it is counted from
// this call's first send, never from the earlier grant. Whatever the call
// spends before its answer (connecting on a new Client, queueing, resends)
// comes off the window: a short lease leaves little room for it.
//
// Reserve and Extend results carry that deadline (Result.SafeUntil), as do
// the Reserves and Extends of a Batch; Result.Deadline is the grid's clock
// and must not be compared with the client's. Process goes by the same
// rule (one function computes it for all of them):
//
//   - A Reserve answered at or after the safe deadline (a slow path, a
//     clock that jumped, a replayed grant with little left) does not run
//     the handler: Process releases the key, fenced by the token and
//     without counting an attempt, and returns ErrLeaseExpired.
//   - While the handler runs, the lease is extended in the background and
//     each successful Extend moves the safe deadline on. When the deadline
//     is reached without one, or an extension is refused, the handler's
//     context is cancelled with a cause matching ErrLeaseLost.
//   - A handler that returns at or after the safe deadline has overrun
//     (Processed.Overran). Its Complete or Fail is sent all the same: the
//     settle is fenced by the token, so it is refused with ErrLeaseLost if
//     another consumer was granted the key meanwhile.
//
// The handler receives the lease's fencing token, strictly increasing per
// key, and should pass it to downstream systems that can refuse an older
// holder: they are what protects the work of a handler that overran.
//
// # Operations
//
// Reserve, Complete, Fail, Release, Extend, Get and Forget map one to one to
// the grid's operations (docs/design.md section 2) and return a Result, the
// grid's answer in Go types, and an error. Outcomes are answers, not
// failures: a Reserve that finds the key BUSY returns that outcome with a nil
// error, and Result.Err turns an outcome into the matching sentinel error
// when the caller prefers. The exception is LEASE_LOST on Complete, Fail,
// Release and Extend, returned as ErrLeaseLost as well, because a lost lease
// is a failure of the holder.
//
// A key reserved WithEntity lives on its entity's shard. Its settles
// (Complete, Fail, Release, Extend) find it by their token, which names the
// shard that granted it, so they need not name the entity (the token
// decides over one they name); Get and Forget must name it with ForEntity,
// or they ask the key's own shard and answer ABSENT. Process names the
// entity by itself.
//
// Every Result says how the call reached the grid: Sends, how many of its
// sends may have been applied (this answer's included; a send refused with
// a Redirect, or that never left the client, proves nothing was applied
// and does not count), and Resent, whether the answer came from a resend
// after such a send. Batch counts them per operation; Processed reports
// those of its Reserve and of its settle.
//
// Errors of calls wrap sentinels compared with errors.Is: ErrInvalidArgument
// and ErrLimitExceeded (the grid's message names the limit), ErrUnavailable,
// ErrClosed. The gRPC status stays reachable with status.FromError. All
// mapping from gRPC codes is in errors.go.
//
// # Batching
//
// Consumers of Kafka or SQS handle hundreds of messages per poll, so batching
// is the normal path. Concurrent calls on one Client are coalesced, one
// dispatcher per grid node, which sends everything queued for the node, up
// to WithMaxBatchSize operations and 4 MiB, as one frame of the node's
// Stream: one long-lived bidirectional stream per node, on which the node
// answers each operation as soon as its shard has applied it, and answers
// ready together share a frame. There is no linger delay: a lone call
// leaves at once, and under load the calls that arrive while a frame is
// written form the next one. With WithStreaming(false), or against a node
// older than Stream, the batches are Batch RPCs instead, sent when a slot
// of the node's in-flight window (WithMaxInFlight) is free, each answered
// when all of its shards have applied their parts. Callers who hold many
// operations at once can send them with Batch instead, which splits them by
// node and sends the nodes' parts in parallel.
//
// A Batch response carries at most 4 MiB of stored results (Result.Result),
// in request order; the results past that budget are left out, marked
// Result.ResultOmitted, so that 1000 duplicates of one key with a 64 KiB
// result cannot ask for a 64 MiB answer. The records keep them, and Get
// returns them. Batch hands such results back as they are; a single call
// that automatic batching put in a Batch whose budget others had spent
// fetches its result with a Get before it returns.
//
// # Routing
//
// Dial takes one address or a comma-separated list of seed addresses, and
// asks them for the cluster map (the ClusterMap RPC) in the background; Dial
// itself neither waits for the grid nor fails when it is down. Operations
// made before the first answer wait for it, within their context, and go to
// the first seed if no node answered.
//
// A standalone node (or one older than clustering) gets every operation, as
// before clustering. On a cluster, the client computes each operation's
// record digest itself (the function the grid uses; a key reserved
// WithEntity is placed by its entity, which is why Get and Forget must name
// it with ForEntity), then the digest's slot and shard, or for a settle the
// shard its token names, and sends the
// operation straight to the node that leads the shard, over one connection
// and one batcher per node. Every operation RPC asks for Redirects (the
// grid-redirect header): a node that does not lead the shard refuses the
// operation, unapplied, with a Redirect naming the leader. The client sends
// it there at once and remembers that leader. A Redirect that names no
// leader, or names the refusing node itself, means leadership is moving: the
// client refreshes the map, pauses briefly and asks the shard's replicas in
// turn: at most 100 ms apart for the first 24 such pauses, which outlast an
// election, then as the retry policy backs off. One whose map epoch is
// newer than the client's refreshes the map. A
// node that cannot serve at all refuses with a Redirect that says why: it is
// starting (no map yet, for example while it restarts) or was removed; the
// client avoids it and asks another node. A Redirect naming a leader the
// client avoids (most likely the node that just failed, named by a follower
// until the election ends) is not followed: the shard's other replicas are
// asked instead; but one naming a node avoided because it was starting is
// followed, as that node has started since. After 8 redirects in a row the
// send fails with ErrUnavailable, and the retry policy decides whether to
// try again.
//
// On a cluster each send has a deadline (WithSendTimeout, default 1.5 s). A
// node that cannot be reached, answers Unavailable without a Redirect, or
// does not answer within the send timeout (frozen, cut off by a partition)
// is avoided for two seconds where its shard has another replica to ask,
// no shard is taken to be led by it until a Redirect or the map says so
// again, and the map is refreshed. Map fetches are single-flight and at
// least 100 ms apart. Locate says which shard, slot and digest a key has
// and which nodes lead and hold the shard, from the client's map.
//
// Status and Audit describe the node the client dialled: the first seed.
// ClusterMap returns the map as the nodes hold it, for status tables.
// WithoutRouting sends everything to the first seed, which forwards what it
// does not lead: one connection and no map, for thin tools.
//
// # Retries and unknown outcomes
//
// A call that finds the grid unavailable (no leader, node shutting down,
// connection refused or broken, no answer within the send timeout) is sent
// again after a capped exponential backoff with jitter, while its
// RetryPolicy allows and its context lasts. The default policy keeps
// sending for 10 s after the first send, backing off from 25 ms up to
// 500 ms: a shard's election after its leader died or froze takes about a
// second, so calls ride through a failover without an error. A policy can
// bound the sends by count instead, or by both. Invalid input is never
// retried. An Unavailable answer does not always mean the operation did not
// run: a retried Reserve's first send may have been granted. Every Reserve
// therefore carries a request id: 16 random bytes from crypto/rand, drawn
// once per logical Reserve (per ReserveOp, per Reserve call, per Process
// call) and the same in all its resends and retries, in a Batch each
// operation its own; WithRequestID sets one instead. A grid that keeps
// request ids answers a Reserve that finds its own lease with that grant
// again (ACQUIRED, same token and deadline, Result.Replayed) instead of
// BUSY. Against a grid that ignores them, the resend comes back BUSY, held
// by a lease whose token the caller never saw; that lease expires and then
// counts as a failed attempt, and Process reports the case as a *BusyError
// with AfterRetry set (Result.Err sets it too). Settles are safe to retry:
// Complete and Fail are idempotent for the same token.
//
// The client counts a send as possibly applied whenever the node's answer
// could hide an effect: an Unavailable answer without a Redirect, a
// connection broken mid-call, a send timeout or a context that ended after
// the request left. A Redirect (not the leader, starting, not a member,
// removed) proves the operation was not applied, and so does a request
// that never left the client (the connection was refused, or it was still
// queued); neither counts: a Reserve redirected to its leader and granted
// there is not AfterRetry, one whose earlier send failed on a lost leader
// is. A call that gives up never reports success. Every operation goes
// the same way, a single call as a batch of one (the engine in engine.go),
// and ends by one rule: once a send may have been applied, an ending
// without an answer of the grid (the retries spent on Unavailable
// answers, a broken connection, the context ended, the client closed) is
// labelled "outcome unknown", since no later answer proved what became of
// it; an ending before anything left the client is labelled "not sent";
// a refusal of the grid (invalid input, a limit, a rate limit, the
// caller's credentials) stands as it came, never unknown. Batch labels
// each operation so.
//
// When a caller's context ends before the answer, the call returns at once
// with an error matching the context's error, but the operation may still run
// on the grid: its outcome is unknown.
package client
