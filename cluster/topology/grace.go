package topology

import (
	"fmt"
	"time"
)

// DefaultGracePeriod is how long a node may be missing from gossip before
// the planner replaces its replicas.
const DefaultGracePeriod = 30 * time.Second

// Grace tracks, for the control leader, since when each node of the map
// has been missing from the gossip view, and answers Plan's deadFor. It
// reads no clock: callers pass now. The zero value is ready, with
// DefaultGracePeriod. A new control leader starts with a fresh Grace, so a
// replacement can only come later than the period, never earlier. Not
// safe for concurrent use.
type Grace struct {
	Period time.Duration // zero means DefaultGracePeriod

	downSince map[NodeID]time.Time
}

// Validate checks the period; errors wrap ErrConfig.
func (g *Grace) Validate() error {
	if g.Period < 0 {
		return fmt.Errorf("%w: grace period %v is negative", ErrConfig, g.Period)
	}
	return nil
}

// Observe records the gossip view at now for every node of m.
func (g *Grace) Observe(now time.Time, m *Map, alive map[NodeID]bool) {
	if g.downSince == nil {
		g.downSince = map[NodeID]time.Time{}
	}
	for id := range g.downSince {
		if _, ok := m.Nodes[id]; !ok || alive[id] {
			delete(g.downSince, id)
		}
	}
	for id := range m.Nodes {
		if _, ok := g.downSince[id]; !ok && !alive[id] {
			g.downSince[id] = now
		}
	}
}

// DeadFor returns Plan's deadFor as of now: whether a node has been
// missing since at least the grace period before now.
func (g *Grace) DeadFor(now time.Time) func(NodeID) bool {
	period := g.Period
	if period == 0 {
		period = DefaultGracePeriod
	}
	return func(id NodeID) bool {
		since, ok := g.downSince[id]
		return ok && now.Sub(since) >= period
	}
}
