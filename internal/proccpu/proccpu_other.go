//go:build !unix

// Package proccpu reads the CPU time this process has used, the figure the
// benchmarks divide by their operations (cpu-us/op, client_cpu_us_per_op).
package proccpu

import "time"

// Used cannot read the process's CPU time here: ok is false.
func Used() (d time.Duration, ok bool) { return 0, false }
