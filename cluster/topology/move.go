package topology

import (
	"fmt"
	"slices"
)

// Move is one step of a placement plan for one shard. The control leader
// executes a move with Add in two halves, add before remove: it commits
// {Shard, Add} to the map (the new node starts an empty replica), adds it
// to the shard's group (AddNonvoter, then AddVoter once it has caught up),
// transfers leadership away from Remove if it leads, calls RemoveServer, and
// commits {Shard, Remove, Leader}. Leader-only moves (Add and Remove empty)
// change the shard's preferred leader; the executor then transfers
// leadership to it.
type Move struct {
	Shard int `json:"shard"`
	// Add is the node that receives a replica ("" = none).
	Add NodeID `json:"add,omitempty"`
	// Remove is the node that gives its replica up ("" = none).
	Remove NodeID `json:"remove,omitempty"`
	// Leader, when set, becomes the shard's preferred leader; it must hold
	// a replica once the move is done. When Remove is the preferred leader
	// and Leader is empty, the first remaining replica by id takes over.
	Leader NodeID `json:"leader,omitempty"`
	// Rejoin is a node the map lists that the shard's group does not count
	// as a voter (an add that was interrupted): the executor adds it again
	// (non-voter, catch up, voter). The map does not change.
	Rejoin NodeID `json:"rejoin,omitempty"`
	// Evict is a member of the shard's group that the map does not list:
	// the executor removes it from the group. The map does not change.
	Evict NodeID `json:"evict,omitempty"`
}

// regroups reports whether mv changes only the shard's group (Rejoin or
// Evict), never the map; such a move is not committed to the map.
func (mv Move) regroups() bool { return mv.Rejoin != "" || mv.Evict != "" }

func (mv Move) String() string {
	if mv.regroups() {
		return fmt.Sprintf("shard %d: rejoin %q evict %q", mv.Shard, mv.Rejoin, mv.Evict)
	}
	return fmt.Sprintf("shard %d: +%q -%q leader %q", mv.Shard, mv.Add, mv.Remove, mv.Leader)
}

// ApplyMove changes m's replica set of mv.Shard as mv says, keeping the
// set canonical (preferred leader first, the rest sorted); it does not
// touch the epoch. A move that does not fit m is refused with an error
// wrapping ErrRejected and m is unchanged.
func (m *Map) ApplyMove(mv Move) error {
	if err := m.checkMove(mv); err != nil {
		return fmt.Errorf("%w: %v: %w", ErrRejected, mv, err)
	}
	old := m.ShardReplicas[mv.Shard]
	leader := mv.Leader
	if leader == "" && len(old) > 0 && old[0] != mv.Remove {
		leader = old[0]
	}
	var rest []NodeID
	for _, id := range old {
		if id != mv.Remove && id != leader {
			rest = append(rest, id)
		}
	}
	if mv.Add != "" && mv.Add != leader {
		rest = append(rest, mv.Add)
	}
	slices.Sort(rest)
	if leader == "" && len(rest) > 0 {
		leader, rest = rest[0], rest[1:]
	}
	set := rest
	if leader != "" {
		set = append([]NodeID{leader}, rest...)
	}
	if len(set) == 0 {
		set = nil
	}
	m.ShardReplicas[mv.Shard] = set
	if m.Leaders != nil && m.Leaders[mv.Shard] != "" && m.Leaders[mv.Shard] == mv.Remove {
		m.Leaders[mv.Shard] = ""
	}
	return nil
}

func (m *Map) checkMove(mv Move) error {
	if mv.Shard < 0 || mv.Shard >= m.Shards {
		return fmt.Errorf("no shard %d", mv.Shard)
	}
	set := m.ShardReplicas[mv.Shard]
	switch {
	case mv.regroups():
		return fmt.Errorf("a group-only move changes no map")
	case mv.Add == "" && mv.Remove == "" && mv.Leader == "":
		return fmt.Errorf("empty move")
	case mv.Add != "" && mv.Add == mv.Remove:
		return fmt.Errorf("adds and removes the same node")
	case mv.Add != "" && slices.Contains(set, mv.Add):
		return fmt.Errorf("node %q already holds a replica", mv.Add)
	case mv.Remove != "" && !slices.Contains(set, mv.Remove):
		return fmt.Errorf("node %q holds no replica", mv.Remove)
	case mv.Remove != "" && mv.Add == "" && len(set) == 1:
		return fmt.Errorf("would remove the last replica")
	case mv.Leader != "" && (mv.Leader == mv.Remove || mv.Leader != mv.Add && !slices.Contains(set, mv.Leader)):
		return fmt.Errorf("leader %q would hold no replica", mv.Leader)
	}
	if mv.Add != "" {
		if n, ok := m.Nodes[mv.Add]; !ok || n.State != NodeActive {
			return fmt.Errorf("node %q is not an active node", mv.Add)
		}
		if mv.Remove == "" && len(set) >= m.Replicas+1 {
			return fmt.Errorf("shard already holds %d replicas", len(set))
		}
	}
	return nil
}
