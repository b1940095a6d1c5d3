package keyspace

import (
	"testing"
	"time"

	"github.com/l4xg/grid/digest"
)

// TestLimitsFitTheMachine: the machine's own limits, and the wire limits of
// package digest checked against the record and entry formats.
func TestLimitsFitTheMachine(t *testing.T) {
	if BackoffBase != time.Second || BackoffMax != 5*time.Minute {
		t.Errorf("BackoffBase %v, BackoffMax %v: want 1s and 5m", BackoffBase, BackoffMax)
	}
	if digest.MaxBatchOps > MaxEntryCommands || MaxEntryCommands > digest.MaxTokenPosition+1 {
		t.Errorf("MaxBatchOps %d, MaxEntryCommands %d: positions must fit a token's %d", digest.MaxBatchOps, MaxEntryCommands, digest.MaxTokenPosition+1)
	}
	if digest.MaxAttemptsCap > 255 {
		t.Errorf("MaxAttemptsCap %d does not fit the record's 8-bit attempts", digest.MaxAttemptsCap)
	}
}

// TestBackoff: 1 s doubled per attempt after the first, capped at 5 min.
func TestBackoff(t *testing.T) {
	want := map[uint8]int64{
		0: 1000, 1: 1000, 2: 2000, 3: 4000, 4: 8000, 5: 16_000, 6: 32_000, 7: 64_000,
		8: 128_000, 9: 256_000, 10: 300_000, 11: 300_000, 100: 300_000, 255: 300_000,
	}
	for a, w := range want {
		if got := Backoff(a); got != w {
			t.Errorf("Backoff(%d) = %d, want %d", a, got, w)
		}
	}
}
