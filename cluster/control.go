package cluster

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
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
	m       *Map // nil until bootstrap
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
func (c *Control) Map() *Map {
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
	cmd, err := DecodeCommand(l.Data)
	if err != nil {
		panic(fmt.Sprintf("cluster: control entry %d (term %d) cannot be applied: %v; "+
			"it was likely written by a newer binary, and applying anything else would diverge from the other voters", l.Index, l.Term, err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next, err := apply(c.m, cmd)
	if err != nil {
		return ApplyResult{Epoch: c.epoch(), Err: err}
	}
	if next != nil {
		c.swap(next)
	}
	return ApplyResult{Epoch: c.epoch()}
}

func (c *Control) epoch() uint64 {
	if c.m == nil {
		return 0
	}
	return c.m.Epoch
}

// swap installs m (nil: no map) and wakes the watchers; c.mu is held.
func (c *Control) swap(m *Map) {
	c.m = m
	close(c.changed)
	c.changed = make(chan struct{})
}

// apply computes the map after cmd: a new map with the epoch bumped, nil
// for a no-op, or an error wrapping ErrRejected. cur is not modified.
func apply(cur *Map, cmd Command) (*Map, error) {
	if cmd.Type == CmdBootstrap {
		if cur != nil {
			return nil, fmt.Errorf("%w: already bootstrapped (epoch %d)", ErrRejected, cur.Epoch)
		}
		next := cmd.Map.Clone()
		next.Epoch = 1
		return next, nil
	}
	if cur == nil {
		return nil, fmt.Errorf("%w: %v before bootstrap", ErrRejected, cmd.Type)
	}
	next := cur.Clone()
	var err error
	switch cmd.Type {
	case CmdNodeJoin:
		err = next.join(cmd.Node)
	case CmdNodeDrain:
		err = next.setState(cmd.ID, NodeDraining)
	case CmdNodeRemove:
		err = next.setState(cmd.ID, NodeRemoved)
	case CmdApplyMove:
		err = next.applyMove(cmd.Move)
		if err == nil && !sameMembers(cur.ShardReplicas[cmd.Move.Shard], next.ShardReplicas[cmd.Move.Shard]) {
			next.bumpGeneration(cmd.Move.Shard)
		}
	case CmdSetLeaderHint:
		err = next.setLeaderHint(cmd.Shard, cmd.ID)
	default:
		panic(fmt.Sprintf("cluster: decoded control command of unknown type %v", cmd.Type))
	}
	if err == nil {
		err = next.Validate()
	}
	if err != nil {
		if !errors.Is(err, ErrRejected) {
			err = fmt.Errorf("%w: %v: %w", ErrRejected, cmd.Type, err)
		}
		return nil, err
	}
	if mapsEqual(cur, next) {
		return nil, nil
	}
	next.Epoch = cur.Epoch + 1
	return next, nil
}

func mapsEqual(a, b *Map) bool {
	ea, eb := a.appendTo(nil), b.appendTo(nil)
	return string(ea) == string(eb)
}

// sameMembers reports whether two replica sets hold the same nodes, in
// any order.
func sameMembers(a, b []NodeID) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(id NodeID) bool { return !slices.Contains(b, id) })
}

// join records n's addresses and incarnation. A new node is active. A
// removed node is admitted again (active, holding nothing) only under a
// new incarnation: the same one stays removed. A node still in the
// cluster keeps its incarnation: one that changed means its data is gone,
// and it is refused until drained and removed. (A join without incarnation,
// from a log written before incarnations, admits it as it always did.)
func (m *Map) join(n NodeInfo) error {
	old, known := m.Nodes[n.ID]
	n.State = NodeActive
	switch {
	case known && old.State == NodeRemoved && n.Incarnation != 0 && n.Incarnation == old.Incarnation:
		return fmt.Errorf("%w: node %q was removed under incarnation %x; only a wiped data directory (a new incarnation) is admitted again", ErrRejected, n.ID, n.Incarnation)
	case known && old.State != NodeRemoved && old.Incarnation != 0 && n.Incarnation != 0 && n.Incarnation != old.Incarnation:
		return fmt.Errorf("%w: node %q is %v under incarnation %x and came back with a wiped data directory (incarnation %x): drain it (it holds nothing it can serve), then it is admitted again", ErrRejected, n.ID, old.State, old.Incarnation, n.Incarnation)
	case known && old.State != NodeRemoved:
		n.State = old.State
		if n.Incarnation == 0 {
			n.Incarnation = old.Incarnation
		}
	}
	m.Nodes[n.ID] = n
	return nil // Validate checks the id and addresses
}

func (m *Map) setState(id NodeID, st NodeState) error {
	n, ok := m.Nodes[id]
	switch {
	case !ok:
		return fmt.Errorf("%w: no node %q", ErrRejected, id)
	case n.State == NodeRemoved && st != NodeRemoved:
		return fmt.Errorf("%w: node %q was removed", ErrRejected, id)
	case st == NodeRemoved && n.State != NodeRemoved && m.holds(id):
		return fmt.Errorf("%w: node %q still holds replicas", ErrRejected, id)
	}
	n.State = st
	m.Nodes[id] = n
	return nil
}

func (m *Map) holds(id NodeID) bool {
	for _, rs := range m.ShardReplicas {
		if slices.Contains(rs, id) {
			return true
		}
	}
	return false
}

func (m *Map) setLeaderHint(shard int, id NodeID) error {
	if shard < 0 || shard >= m.Shards {
		return fmt.Errorf("%w: no shard %d", ErrRejected, shard)
	}
	if id != "" && !slices.Contains(m.ShardReplicas[shard], id) {
		return fmt.Errorf("%w: node %q holds no replica of shard %d", ErrRejected, id, shard)
	}
	if m.Leaders == nil {
		m.Leaders = make([]NodeID, m.Shards)
	}
	m.Leaders[shard] = id
	return nil
}

// Snapshot captures a copy of the map; Persist writes it concurrently with
// later applies.
func (c *Control) Snapshot() (raft.FSMSnapshot, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return &controlSnapshot{data: encodeSnapshot(c.m)}, nil
}

const snapshotVersion = 1

// encodeSnapshot: version byte, then 0 (no map yet) or 1 and the map.
func encodeSnapshot(m *Map) []byte {
	b := []byte{snapshotVersion, 0}
	if m != nil {
		b[1] = 1
		b = m.appendTo(b)
	}
	return b
}

func decodeSnapshot(b []byte) (*Map, error) {
	r := &reader{b: b}
	if v := r.byte(); r.err == nil && v != snapshotVersion {
		r.fail("snapshot version %d, this binary reads %d", v, snapshotVersion)
	}
	has := r.byte()
	if r.err != nil || has == 0 {
		return nil, r.done()
	}
	if has != 1 {
		return nil, fmt.Errorf("%w: snapshot map flag %d", ErrCorrupt, has)
	}
	m, err := readMap(r)
	if err != nil {
		return nil, err
	}
	return m, r.done()
}

// Restore replaces the state with a snapshot: it decodes into a fresh map
// and swaps only when the whole snapshot is good.
func (c *Control) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("cluster: restore control snapshot: %w", err)
	}
	m, err := decodeSnapshot(b)
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
