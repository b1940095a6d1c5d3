// Package testclock is the settable clock of the tests: time moves only
// when the test says, in whole milliseconds (the unit of the grid's
// stamps), and the clock is safe for concurrent use. Its Now is the
// func() time.Time the grid takes as a clock (shard.HostConfig.Clock,
// gridtest.Options.Clock).
package testclock

import (
	"sync/atomic"
	"time"
)

// Clock is a clock a test sets and moves.
type Clock struct{ ms atomic.Int64 }

// New returns a clock at 2026-12-01 00:00 UTC: a fixed start, so that
// stamps and deadlines are the same in every run.
func New() *Clock { return At(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) }

// At returns a clock at t, truncated to the millisecond.
func At(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

// UnixMilli is the clock's time in milliseconds since the Unix epoch.
func (c *Clock) UnixMilli() int64 { return c.ms.Load() }

// Add moves the clock by d (backwards when d is negative).
func (c *Clock) Add(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) { c.ms.Store(t.UnixMilli()) }
