package check

import (
	"context"
	"sync"
	"time"

	"github.com/l4xg/grid/client"
)

// The deliberately broken grids below are what the checker must catch: if
// a history made through one of them passes, the checker proves nothing.
// The test suite and the chaos tool (--broken) wrap their executors in
// them.

// StaleGets is a broken grid whose Get is answered from a cache in front of
// the grid, filled by the first Get of each key and never invalidated —
// what a follower read without ReadIndex, or a read path that skips the
// log, looks like from outside.
func StaleGets(e Executor) Executor {
	return &staleGets{Executor: e, cache: map[string]Output{}}
}

type staleGets struct {
	Executor
	mu    sync.Mutex
	cache map[string]Output
}

func (s *staleGets) Do(ctx context.Context, in Input) (Output, error) {
	if in.Kind != KindGet {
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

// LostCompletes is a broken grid that acknowledges a Complete without it
// ever reaching the log (as a leader that answers before the entry
// commits, then loses it), with the answer a real Complete would give.
func LostCompletes(e Executor) Executor { return lostCompletes{e} }

type lostCompletes struct {
	Executor
}

func (l lostCompletes) Do(ctx context.Context, in Input) (Output, error) {
	if in.Kind != KindComplete || in.Result == "stale" {
		return l.Executor.Do(ctx, in)
	}
	now := time.Now().UnixMilli()
	return Output{
		Outcome: client.OutcomeOK, State: client.StateCompleted, Token: in.Token, Attempt: 1,
		Deadline: now + in.Retention, Now: now, Result: in.Result,
	}, nil
}

// FollowerReads is a broken cluster whose Get is answered by one node
// from its applied state, without ReadIndex and without going through the
// log, as a node that served Gets from any replica would: Get is sent with
// stale_ok to nodes[reader(key)], a client WithoutRouting (which never
// forwards a stale read: a node holding a replica answers it locally).
func FollowerReads(e Executor, ns string, nodes []*client.Client, reader func(key string) int) Executor {
	return followerReads{Executor: e, ns: ns, nodes: nodes, reader: reader}
}

type followerReads struct {
	Executor
	ns     string
	nodes  []*client.Client
	reader func(key string) int
}

func (f followerReads) Do(ctx context.Context, in Input) (Output, error) {
	if in.Kind != KindGet {
		return f.Executor.Do(ctx, in)
	}
	r, err := f.nodes[f.reader(in.Key)].Get(ctx, f.ns, in.Key, client.WithStaleOK())
	return Classify(r, err)
}
