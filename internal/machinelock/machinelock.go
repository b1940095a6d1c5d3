// Package machinelock keeps the tests that load the whole machine apart
// from the tests that need it quiet enough to keep their clocks.
//
// go test runs packages side by side, each in its own process. Most get
// along. Two kinds do not: the ledger run (a 3-node grid of processes,
// four consumers, RabbitMQ and PostgreSQL, a load of about 16 on a 2-core
// box for minutes) and the in-process clusters whose Raft groups keep
// their leaders with 500 ms heartbeats and whose faults are timed. Beside
// the ledger run such a cluster's operations take seconds each, leaders
// come and go, and a test's history fills with unknown outcomes: the test
// then measures the machine, not the grid. So a test that loads the
// machine takes it Exclusive, and a timing-sensitive one takes it Shared:
// those run together with each other, never beside the first kind.
//
// The lock is an flock on one file in the temporary directory, so it holds
// across the processes of one go test run (and of runs started side by
// side) and goes with the process when it dies. On systems without flock
// nothing is locked.
package machinelock

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Name is the lock file's name in os.TempDir().
const Name = "l4xg-grid-tests.lock"

// Shared holds the machine shared until t ends: beside other shared
// holders, never beside an exclusive one.
func Shared(t testing.TB) {
	t.Helper()
	hold(t, false)
}

// Exclusive holds the machine alone until t ends.
func Exclusive(t testing.TB) {
	t.Helper()
	hold(t, true)
}

func hold(t testing.TB, exclusive bool) {
	t.Helper()
	path := filepath.Join(os.TempDir(), Name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666) // flock needs no write access: any user can hold it
	if err != nil {
		t.Fatalf("machinelock: %v", err)
	}
	start := time.Now()
	if err := lock(f, exclusive); err != nil {
		f.Close()
		t.Fatalf("machinelock: lock %s: %v", path, err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("machinelock: waited %v for the machine (%s)", waited.Round(time.Millisecond), path)
	}
	t.Cleanup(func() { f.Close() })
}
