package testclock

import (
	"sync"
	"testing"
	"time"
)

// The clock moves only when told, by whole milliseconds, and concurrent
// moves all count.
func TestClock(t *testing.T) {
	c := New()
	start := c.Now()
	if want := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC); !start.Equal(want) {
		t.Fatalf("New() = %v, want %v", start, want)
	}
	if !c.Now().Equal(start) {
		t.Fatal("the clock moved by itself")
	}
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { c.Add(time.Millisecond) })
	}
	wg.Wait()
	if got := c.Now().Sub(start); got != 100*time.Millisecond {
		t.Fatalf("after 100 concurrent Add(1ms): moved %v", got)
	}
	c.Set(time.UnixMilli(1234).Add(999 * time.Microsecond))
	if c.UnixMilli() != 1234 {
		t.Fatalf("Set truncates to the millisecond: %d, want 1234", c.UnixMilli())
	}
	if at := At(time.UnixMilli(5)); at.UnixMilli() != 5 {
		t.Fatalf("At(5 ms) = %d", at.UnixMilli())
	}
}
