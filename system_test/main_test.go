// Package system_test holds the grid's system tests: whole grids, in this
// process (internal/gridtest: real Raft, Pebble, gRPC and gossip on
// loopback) or as gridnode processes, driven by workloads whose histories
// the checkers of chaos/check judge (linearizability per key, fencing
// tokens, single holder), under restarts, kill -9, partitions, clock
// skew and membership changes. The chaos tool (chaos/) runs the same
// checks against a cluster of processes for as long as asked; these are
// the runs sized for go test.
package system_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Pebble's block cache keeps a process-wide worker.
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2/internal/cache.(*shard).releaseLoop"),
		// gRPC's client transport closes asynchronously after Close.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}
