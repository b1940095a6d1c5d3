package shard

import (
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Pebble and raft keep a few process-wide workers.
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2/internal/cache.(*shard).releaseLoop"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*InmemTransport).Close"),
	)
}
