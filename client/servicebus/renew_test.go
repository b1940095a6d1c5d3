package servicebus

import (
	"testing"
	"time"
)

// TestRenewWait: the wait before a lock renewal is a third of what is
// left of the lock; after failed renewals it backs off (100 ms doubling,
// at most 5 s) instead of a third of a lock that did not move, which is
// soon the 10 ms floor: the loop that made 271 calls in 3 s.
func TestRenewWait(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) *time.Time { u := now.Add(d); return &u }
	for _, c := range []struct {
		failures int
		until    *time.Time
		want     time.Duration
	}{
		{0, at(30 * time.Second), 10 * time.Second},
		{0, nil, 10 * time.Second},
		{0, at(15 * time.Millisecond), 10 * time.Millisecond},
		{0, at(-time.Second), 10 * time.Millisecond},
		{1, at(15 * time.Millisecond), 100 * time.Millisecond},
		{2, at(-time.Second), 200 * time.Millisecond},
		{4, at(-time.Second), 800 * time.Millisecond},
		{7, at(-time.Second), 5 * time.Second},
		{1000, at(-time.Second), 5 * time.Second},
	} {
		if got := renewWait(c.failures, c.until, now); got != c.want {
			t.Errorf("after %d failures, lock until %v: wait %v, want %v", c.failures, c.until, got, c.want)
		}
	}
}
