package topology

import (
	"errors"
	"testing"
	"time"
)

func TestGrace(t *testing.T) {
	m := newWorld(2, 1, "a", "b").m
	var g Grace // zero value: 30 s
	t0 := time.Unix(1000, 0)
	alive := map[NodeID]bool{"a": true, "x": true} // b is down
	g.Observe(t0, m, alive)
	if g.DeadFor(t0.Add(29 * time.Second))("b") {
		t.Fatal("b dead before the grace period")
	}
	g.Observe(t0.Add(20*time.Second), m, alive) // still down: keeps its first time
	if !g.DeadFor(t0.Add(30 * time.Second))("b") {
		t.Fatal("b not dead after the grace period")
	}
	if g.DeadFor(t0.Add(time.Hour))("a") || g.DeadFor(t0.Add(time.Hour))("x") {
		t.Fatal("alive or unknown node reported dead")
	}
	// b comes back, then goes again: the clock restarts.
	alive["b"] = true
	g.Observe(t0.Add(40*time.Second), m, alive)
	alive["b"] = false
	g.Observe(t0.Add(50*time.Second), m, alive)
	if g.DeadFor(t0.Add(70 * time.Second))("b") {
		t.Fatal("grace did not restart after b came back")
	}
	if err := (&Grace{Period: -time.Second}).Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative period: %v", err)
	}
}
