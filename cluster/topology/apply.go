package topology

import (
	"errors"
	"fmt"
	"slices"
)

// Apply computes the map after cmd: a new map with the epoch bumped, nil
// for a no-op, or an error wrapping ErrRejected. cur is not modified.
func Apply(cur *Map, cmd Command) (*Map, error) {
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
		err = next.ApplyMove(cmd.Move)
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
	case st == NodeRemoved && n.State != NodeRemoved && m.Holds(id):
		return fmt.Errorf("%w: node %q still holds replicas", ErrRejected, id)
	}
	n.State = st
	m.Nodes[id] = n
	return nil
}

func (m *Map) Holds(id NodeID) bool {
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

const snapshotVersion = 1

// EncodeSnapshot: version byte, then 0 (no map yet) or 1 and the map.
func EncodeSnapshot(m *Map) []byte {
	b := []byte{snapshotVersion, 0}
	if m != nil {
		b[1] = 1
		b = m.appendTo(b)
	}
	return b
}

func DecodeSnapshot(b []byte) (*Map, error) {
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
