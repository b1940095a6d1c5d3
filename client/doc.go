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
// WaitForHolder); ErrPoisoned means dead-letter the message; ErrStale means
// ack and drop it; ErrMismatch means the key was reused for another payload.
//
// A lease is only trusted until the local safe deadline: the client's clock
// before the Reserve was sent, plus the lease, minus a margin for skew. When
// no extension has succeeded by then, or an extension is refused, the
// handler's context is cancelled with a cause matching ErrLeaseLost. The
// handler receives the lease's fencing token, strictly increasing per key,
// and should pass it to downstream systems that can refuse an older holder.
//
// # Operations
//
// Reserve, Complete, Fail, Release, Extend, Get and Forget map one to one to
// the grid's operations (DESIGN.md section 2) and return a Result, the grid's
// answer in Go types, and an error. Outcomes are answers, not failures: a
// Reserve that finds the key BUSY returns that outcome with a nil error, and
// Result.Err turns an outcome into the matching sentinel error when the
// caller prefers. The exception is LEASE_LOST on Complete, Fail, Release and
// Extend, returned as ErrLeaseLost as well, because a lost lease is a failure
// of the holder.
//
// A key reserved WithEntity lives on its entity's shard, so every later
// operation on it must name the entity with ForEntity; Process does this by
// itself.
//
// Errors of calls wrap sentinels compared with errors.Is: ErrInvalidArgument
// and ErrLimitExceeded (the grid's message names the limit), ErrUnavailable,
// ErrClosed. The gRPC status stays reachable with status.FromError. All
// mapping from gRPC codes is in errors.go.
//
// # Batching
//
// Consumers of Kafka or SQS handle hundreds of messages per poll, so batching
// is the normal path. Concurrent calls on one Client are coalesced into Batch
// RPCs by one dispatcher: when a slot of the in-flight window (WithMaxInFlight)
// is free it sends everything queued, up to WithMaxBatchSize operations and
// 4 MiB. There is no linger delay: a lone call leaves at once, and under load
// the calls that arrive during the round trips in flight form the next
// batches. Callers who hold many operations at once can send them with Batch
// instead.
//
// # Retries and unknown outcomes
//
// A call that finds the grid unavailable (no leader, node shutting down,
// connection refused or broken) is sent again after a capped exponential
// backoff with jitter, up to the attempts of the RetryPolicy and while its
// context lasts. Invalid input is never retried. An Unavailable answer does
// not always mean the operation did not run: a retried Reserve whose first
// send was granted comes back BUSY, held by a lease whose token the caller
// never saw. That lease expires and then counts as a failed attempt; Process
// reports the case as a *BusyError with AfterRetry set. Settles are safe to
// retry: Complete and Fail are idempotent for the same token.
//
// When a caller's context ends before the answer, the call returns at once
// with an error matching the context's error, but the operation may still run
// on the grid: its outcome is unknown.
//
// # Routing
//
// This version sends every operation to the node it dialled. Computing
// digests and sending batches straight to shard leaders (DESIGN.md section 5)
// needs the cluster map in the protocol.
package client
