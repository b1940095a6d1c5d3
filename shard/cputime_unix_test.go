//go:build unix

package shard

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used so far, user and
// system; ok is false where it cannot be read.
func processCPU() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
