package system_test

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestCheckerCatchesBrokenGrid: the same workload against a real node
// behind a deliberately broken layer is reported not linearizable. If these
// pass while the grid is broken this way, the checker proves nothing.
func TestCheckerCatchesBrokenGrid(t *testing.T) {
	cases := map[string]func(check.Executor) check.Executor{
		"stale-gets":     check.StaleGets,
		"lost-completes": check.LostCompletes,
	}
	s := firstSeed(t)
	for name, wrap := range cases {
		t.Run(name, func(t *testing.T) {
			cl := &singleNode{n: gridtest.Start(t, gridtest.Options{Shards: 2})}
			w := workload{seed: s, workers: 8, clients: 2, keys: 5, ops: 400, wrap: wrap}
			ops := run(t, cl, w)
			checkHistory(t, name, ops, porcupine.Illegal)
		})
	}
}
