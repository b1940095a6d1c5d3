package raftlog

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: the
// Mux, its layers and the transports on them must stop everything they
// start.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Pebble's block cache goroutines outlive a closed DB by design.
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2/internal/cache.(*shard).releaseLoop"),
	)
}
