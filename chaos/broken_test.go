package main_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
)

// staleGets is a deliberately broken grid: Get is answered from a cache in
// front of the grid, filled by the first Get of each key and never
// invalidated — what a follower read without ReadIndex, or a read path that
// skips the log, looks like from outside.
type staleGets struct {
	check.Executor
	mu    *sync.Mutex
	cache map[string]check.Output
}

func (s staleGets) Do(ctx context.Context, in check.Input) (check.Output, error) {
	if in.Kind != check.KindGet {
		return s.Executor.Do(ctx, in)
	}
	s.mu.Lock()
	out, ok := s.cache[in.Key]
	s.mu.Unlock()
	if ok {
		return out, nil
	}
	out, err := s.Executor.Do(ctx, in)
	if err == nil && !out.Unknown {
		s.mu.Lock()
		s.cache[in.Key] = out
		s.mu.Unlock()
	}
	return out, err
}

// lostCompletes is a deliberately broken grid: a Complete is acknowledged
// without ever reaching the log (as a leader that answers before the entry
// commits, then loses it), with the answer a real Complete would give.
type lostCompletes struct {
	check.Executor
}

func (l lostCompletes) Do(ctx context.Context, in check.Input) (check.Output, error) {
	if in.Kind != check.KindComplete || in.Result == "stale" {
		return l.Executor.Do(ctx, in)
	}
	now := time.Now().UnixMilli()
	return check.Output{
		Outcome: client.OutcomeOK, State: client.StateCompleted, Token: in.Token, Attempt: 1,
		Deadline: now + in.Retention, Now: now, Result: in.Result,
	}, nil
}

// TestCheckerCatchesBrokenGrid: the same workload against a real node
// behind a deliberately broken layer is reported not linearizable. If these
// pass while the grid is broken this way, the checker proves nothing.
func TestCheckerCatchesBrokenGrid(t *testing.T) {
	cases := map[string]func(check.Executor) check.Executor{
		"stale-gets": func(e check.Executor) check.Executor {
			return staleGets{Executor: e, mu: &sync.Mutex{}, cache: map[string]check.Output{}}
		},
		"lost-completes": func(e check.Executor) check.Executor { return lostCompletes{e} },
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
