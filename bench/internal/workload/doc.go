// Package workload defines the benchmark workloads and runs them against a
// Target with the same semantics on every target: what counts as one
// operation, which calls it makes, and what is a duplicate suppressed or an
// error.
//
// A Target is the few calls an idempotent receiver needs from a store:
// put-if-absent with a lease (Reserve), settle with a retention (Complete),
// many put-if-absent in one call (ReserveBatch) and the server's own memory
// figure. The target packages map them onto grid, Redis and etcd.
package workload
