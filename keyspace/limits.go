package keyspace

import "time"

// The machine's own timing rules. The wire limits and defaults are in
// package digest.
const (
	// BackoffBase and BackoffMax bound the exponential retry delay of Fail
	// without retry_after: BackoffBase << (attempt-1), at most BackoffMax.
	BackoffBase = time.Second
	BackoffMax  = 5 * time.Minute

	// AbandonAfter is how long a PROCESSING or FAILED record is kept past its
	// deadline when no consumer comes back for it; after that it is reclaimed.
	AbandonAfter = 7 * 24 * time.Hour
)
