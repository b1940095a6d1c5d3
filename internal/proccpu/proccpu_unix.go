//go:build unix

// Package proccpu reads the CPU time this process has used, the figure the
// benchmarks divide by their operations (cpu-us/op, client_cpu_us_per_op).
package proccpu

import (
	"syscall"
	"time"
)

// Used returns the user and system CPU time of this process so far; ok is
// false where it cannot be read.
func Used() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
