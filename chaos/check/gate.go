package check

import (
	"context"
	"sync"
)

// Gate holds a workload's callers back while a fault is under way: a
// caller whose call had an unknown outcome waits for the grid to be back
// before it carries on, so that a fault leaves at most one open-ended
// operation per caller (each multiplies the states the checker explores).
// Down and Raise are idempotent; a Gate starts raised.
type Gate struct {
	mu     sync.Mutex
	up     chan struct{} // closed while raised
	isDown bool
}

// NewGate is a raised Gate.
func NewGate() *Gate {
	g := &Gate{up: make(chan struct{})}
	close(g.up)
	return g
}

// Down holds the callers that Wait from now on.
func (g *Gate) Down() {
	g.mu.Lock()
	if !g.isDown {
		g.up, g.isDown = make(chan struct{}), true
	}
	g.mu.Unlock()
}

// Raise lets every caller waiting go on.
func (g *Gate) Raise() {
	g.mu.Lock()
	if g.isDown {
		close(g.up)
		g.isDown = false
	}
	g.mu.Unlock()
}

// Wait returns once the Gate is raised or ctx ends.
func (g *Gate) Wait(ctx context.Context) {
	g.mu.Lock()
	up := g.up
	g.mu.Unlock()
	select {
	case <-up:
	case <-ctx.Done():
	}
}
