package cluster

import (
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/l4xg/grid/cluster/topology"
)

// Control is the control group's Raft FSM: it holds the cluster map and
// applies control commands to it. Apply is deterministic (no clock, no
// I/O, no randomness): every voter holds the same map at the same index.
//
// Every command that changes the map bumps its epoch; a command that
// changes nothing (a join repeating known addresses, a drain of a draining
// node) is a no-op and leaves the epoch alone, so the control leader may
// re-propose what gossip tells it without churning clients. A command that
// does not fit the map is rejected: the result carries an error wrapping
// ErrRejected and the map is unchanged. A committed entry that does not
// decode, or has a type this binary does not know, panics (see
// CommandType).
//
// Readers get copies (Map); Changed signals a new map.
type Control struct {
	mu      sync.RWMutex
	m       *topology.Map // nil until bootstrap
	changed chan struct{}
}

var (
	_ raft.FSM         = (*Control)(nil)
	_ raft.FSMSnapshot = (*controlSnapshot)(nil)
)

// ApplyResult is what Control.Apply returns for every entry (the Raft
// future's Response).
type ApplyResult struct {
	Epoch uint64 // the map's epoch after the command
	Err   error  // nil, or wraps ErrRejected
}

// NewControl returns an FSM holding no map yet.
func NewControl() *Control {
	return &Control{changed: make(chan struct{})}
}

// Map returns a copy of the current map, or nil before bootstrap.
func (c *Control) Map() *topology.Map {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.m == nil {
		return nil
	}
	return c.m.Clone()
}

// Changed returns a channel closed at the next change of the map.
func (c *Control) Changed() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changed
}

// Apply applies one committed control command.
func (c *Control) Apply(l *raft.Log) interface{} {
	cmd, err := topology.DecodeCommand(l.Data)
	if err != nil {
		panic(fmt.Sprintf("cluster: control entry %d (term %d) cannot be applied: %v; "+
			"it was likely written by a newer binary, and applying anything else would diverge from the other voters", l.Index, l.Term, err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next, err := topology.Apply(c.m, cmd)
	if err != nil {
		return ApplyResult{Epoch: c.epoch(), Err: err}
	}
	if next != nil {
		c.swap(next)
	}
	return ApplyResult{Epoch: c.epoch()}
}

// NodeState is node id's state in the current map (0 when the map does not
// list it, or before bootstrap), without copying the map.
func (c *Control) NodeState(id topology.NodeID) topology.NodeState {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.m == nil {
		return 0
	}
	return c.m.Nodes[id].State
}

func (c *Control) epoch() uint64 {
	if c.m == nil {
		return 0
	}
	return c.m.Epoch
}

// swap installs m (nil: no map) and wakes the watchers; c.mu is held.
func (c *Control) swap(m *topology.Map) {
	c.m = m
	close(c.changed)
	c.changed = make(chan struct{})
}

// Snapshot captures a copy of the map; Persist writes it concurrently with
// later applies.
func (c *Control) Snapshot() (raft.FSMSnapshot, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return &controlSnapshot{data: topology.EncodeSnapshot(c.m)}, nil
}

// Restore replaces the state with a snapshot: it decodes into a fresh map
// and swaps only when the whole snapshot is good.
func (c *Control) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("cluster: restore control snapshot: %w", err)
	}
	m, err := topology.DecodeSnapshot(b)
	if err != nil {
		return fmt.Errorf("cluster: restore control snapshot: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.swap(m)
	return nil
}

type controlSnapshot struct{ data []byte }

func (s *controlSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cluster: persist control snapshot: %w", err)
	}
	return sink.Close()
}

func (s *controlSnapshot) Release() {}
