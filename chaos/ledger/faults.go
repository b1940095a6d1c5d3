package ledger

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/l4xg/grid/internal/launch"
)

// gridNodeDown is how long the killed grid node stays down.
const gridNodeDown = 3 * time.Second

// faults injects the run's faults as the payments settle: each at a share
// of the payments settled (progress, 0 to 1).
type faults struct {
	fleet *fleet
	rep   *Report
	log   io.Writer
	rng   *rand.Rand
	n     int // the consumers of the fleet at the start

	kills []float64 // one consumer kill -9 at each
	// join and leave: one more consumer starts, and later stops; negative
	// once done or when not asked for.
	join, leave float64
	joined      int

	victim        *launch.Gridnode
	gridKilled    bool
	gridRestarted bool
	gridKilledAt  time.Time
}

func newFaults(cfg Config, rng *rand.Rand, cluster *launch.GridCluster, fleet *fleet, rep *Report, log io.Writer) *faults {
	f := &faults{fleet: fleet, rep: rep, log: log, rng: rng, n: cfg.consumers, join: -1, leave: -1,
		gridKilled: !cfg.killGridNode, gridRestarted: !cfg.killGridNode}
	for i := range cfg.killConsumers {
		f.kills = append(f.kills, 0.1+0.6*float64(i)/float64(max(1, cfg.killConsumers)))
	}
	if cfg.joinLeave {
		f.join, f.leave = 0.15, 0.55
	}
	f.victim = cluster.Nodes[1+rng.IntN(len(cluster.Nodes)-1)]
	return f
}

// step injects the faults due at progress.
func (f *faults) step(ctx context.Context, progress float64) error {
	for len(f.kills) > 0 && progress >= f.kills[0] {
		f.kills = f.kills[1:]
		i := f.rng.IntN(f.n)
		fmt.Fprintf(f.log, "ledger: kill -9 consumer %d\n", i)
		f.fleet.kill(i)
		f.rep.ConsumerKills++
	}
	if f.join >= 0 && progress >= f.join {
		f.join = -1
		f.joined = f.fleet.join()
		fmt.Fprintf(f.log, "ledger: a consumer joins\n")
		f.rep.ConsumerJoins++
	}
	if f.join < 0 && f.leave >= 0 && progress >= f.leave {
		f.leave = -1
		fmt.Fprintf(f.log, "ledger: the consumer that joined leaves (SIGTERM)\n")
		f.fleet.leave(f.joined)
		f.rep.ConsumerLeaves++
	}
	if !f.gridKilled && progress >= 0.3 {
		fmt.Fprintf(f.log, "ledger: kill -9 grid node %s\n", f.victim.ID)
		f.victim.Kill()
		f.gridKilled, f.gridKilledAt = true, time.Now()
		f.rep.GridNodeKills++
	}
	if f.gridKilled && !f.gridRestarted && time.Since(f.gridKilledAt) >= gridNodeDown {
		fmt.Fprintf(f.log, "ledger: restart grid node %s\n", f.victim.ID)
		if err := f.victim.Restart(ctx); err != nil {
			return err
		}
		f.gridRestarted = true
	}
	return nil
}

// done reports whether every fault has happened.
func (f *faults) done() bool {
	return len(f.kills) == 0 && f.join < 0 && f.leave < 0 && f.gridRestarted
}
