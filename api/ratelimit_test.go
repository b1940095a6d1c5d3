package api

import (
	"testing"
	"time"
)

// TestRateLimiterPerNamespace: a namespace gets its rate with a burst of
// one second's worth, then waits as long as its debt says; another
// namespace is not affected; time refills the bucket.
func TestRateLimiterPerNamespace(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewRateLimiter(10)
	l.now = func() time.Time { return now }
	for i := range 10 {
		if _, ok := l.take("a", 1); !ok {
			t.Fatalf("operation %d of a burst of 10 refused", i)
		}
	}
	wait, ok := l.take("a", 1)
	if ok || wait < 90*time.Millisecond || wait > 110*time.Millisecond {
		t.Fatalf("the 11th: ok %v, wait %v, want refused for about 100ms", ok, wait)
	}
	if _, ok := l.take("b", 10); !ok {
		t.Fatal("namespace b was held back by a's storm")
	}
	now = now.Add(500 * time.Millisecond)
	if _, ok := l.take("a", 5); !ok {
		t.Fatal("half a second later a has room for 5")
	}
	if _, ok := l.take("a", 1); ok {
		t.Fatal("a took more than it refilled")
	}
}
