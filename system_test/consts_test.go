package system_test

import "time"

// Durations of the workloads, in the milliseconds the model takes.
const (
	hour = int64(time.Hour / time.Millisecond)
	day  = 24 * hour
)
