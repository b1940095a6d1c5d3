package main_test

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
