package main_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/l4xg/grid/chaos/ledger"
)

// TestMain makes the test binary a ledger consumer when TestLedger's run
// starts it as one.
func TestMain(m *testing.M) {
	if ledger.IsConsumer() {
		os.Exit(ledger.ConsumerMain(os.Args[1:]))
	}
	goleak.VerifyTestMain(m,
		// Pebble's block cache keeps a process-wide worker.
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2/internal/cache.(*shard).releaseLoop"),
		// gRPC's client transport closes asynchronously after Close.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}
