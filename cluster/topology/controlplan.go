package topology

import (
	"fmt"
	"maps"
	"slices"
)

// ControlAction is one change of the control group's own membership.
type ControlAction uint8

const (
	// ControlAddNonvoter adds a node as a non-voter: it receives the map.
	ControlAddNonvoter ControlAction = iota + 1
	// ControlPromote makes a non-voter a voter.
	ControlPromote
	// ControlRemove removes a node from the group.
	ControlRemove
	// ControlHandOver hands the leadership over: the leader's own node was
	// removed, and a leader cannot remove itself cleanly; the next leader
	// removes it.
	ControlHandOver
)

var controlActionNames = [...]string{"", "add-nonvoter", "promote", "remove", "hand-over"}

func (a ControlAction) String() string {
	if a >= ControlAddNonvoter && a <= ControlHandOver {
		return controlActionNames[a]
	}
	return fmt.Sprintf("control-action(%d)", uint8(a))
}

// ControlChange is one step of a control-group membership plan.
type ControlChange struct {
	Action ControlAction
	Node   NodeID
	// RaftAddr is the node's Raft address (add and promote).
	RaftAddr string
	// Why says in words what made the planner change it, for the log.
	Why string
}

func (c ControlChange) String() string {
	return fmt.Sprintf("%v %s (%s)", c.Action, c.Node, c.Why)
}

// ControlVoters is the control group's voter count for a cluster of active
// nodes (docs/design.md section 5): 1 below 3 nodes, 3 for 3 or 4, then 5.
func ControlVoters(active int) int {
	switch {
	case active < 3:
		return 1
	case active < 5:
		return 3
	}
	return 5
}

// minControlVoters is the fewest voters a death can shrink the group to:
// a node seen dead past the grace period leaves the group's voters only
// while at least this many remain. Gossip can
// be wrong, a partitioned leader seeing everyone dead, and a group shrunk
// to its leader alone would commit anything that leader says.
const minControlVoters = 3

// PlanControl computes the changes that keep the control group's
// membership in line with the map. It is pure and deterministic (node id
// order). self is the planning leader, members the group's configuration
// as the leader has it, alive the gossip view and deadFor whether a node
// has been missing past the grace period.
//
// Rules:
//
//   - A leader whose node the map has removed only hands the leadership
//     over.
//   - Every node of the map that is not removed and is alive is a member:
//     a non-voter until promoted.
//   - The group wants controlVoters(active nodes not dead past grace)
//     voters: alive active non-voters are promoted, by id, until the
//     voters that stay reach that count.
//   - Members the map has removed or does not list leave the group, and so
//     does a voter dead past the grace period once a replacement is
//     promoted (while minControlVoters remain); a voter leaves only while
//     the group keeps a majority of live voters. self never leaves.
func PlanControl(m *Map, self NodeID, members []GroupMember, alive map[NodeID]bool, deadFor func(NodeID) bool) []ControlChange {
	if m.Nodes[self].State == NodeRemoved {
		return []ControlChange{{Action: ControlHandOver, Node: self, Why: "this node was removed from the map"}}
	}
	p := &controlPlanner{m: m, self: self, alive: alive, deadFor: deadFor, voter: map[NodeID]bool{}}
	for _, mb := range members {
		p.voter[mb.ID] = mb.Voter
	}
	p.addMembers()
	p.promote()
	p.removeLeavers()
	return p.out
}

type controlPlanner struct {
	m       *Map
	self    NodeID
	alive   map[NodeID]bool
	deadFor func(NodeID) bool
	voter   map[NodeID]bool // the members: true for a voter
	out     []ControlChange
}

// live reports whether id can vote now, as far as gossip tells.
func (p *controlPlanner) live(id NodeID) bool {
	return id == p.self || p.alive[id] && !p.deadFor(id)
}

// leaving reports whether member id is to leave the group, and why.
func (p *controlPlanner) leaving(id NodeID) (bool, string) {
	info, listed := p.m.Nodes[id]
	switch {
	case id == p.self:
		return false, ""
	case !listed:
		return true, "not in the map"
	case info.State == NodeRemoved:
		return true, "removed from the map"
	case p.deadFor(id):
		return true, "dead past the grace period"
	}
	return false, ""
}

func (p *controlPlanner) addMembers() {
	for _, id := range p.m.sortedNodeIDs() {
		info := p.m.Nodes[id]
		if _, member := p.voter[id]; member || info.State == NodeRemoved || !p.alive[id] || p.deadFor(id) {
			continue
		}
		p.voter[id] = false
		p.out = append(p.out, ControlChange{Action: ControlAddNonvoter, Node: id, RaftAddr: info.RaftAddr, Why: "in the map and alive"})
	}
}

func (p *controlPlanner) promote() {
	active := 0
	for id, info := range p.m.Nodes {
		if info.State == NodeActive && !p.deadFor(id) {
			active++
		}
	}
	want := ControlVoters(active)
	staying := 0
	for id, v := range p.voter {
		if leave, _ := p.leaving(id); v && !leave {
			staying++
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.voter)) {
		if staying >= want {
			return
		}
		info := p.m.Nodes[id]
		if p.voter[id] || info.State != NodeActive || !p.alive[id] || p.deadFor(id) {
			continue
		}
		p.voter[id] = true
		staying++
		p.out = append(p.out, ControlChange{Action: ControlPromote, Node: id, RaftAddr: info.RaftAddr,
			Why: fmt.Sprintf("the group has %d of %d voters for %d active nodes", staying-1, want, active)})
	}
}

func (p *controlPlanner) removeLeavers() {
	for _, id := range slices.Sorted(maps.Keys(p.voter)) {
		leave, why := p.leaving(id)
		if !leave {
			continue
		}
		if p.voter[id] && !p.canRemoveVoter(id) {
			continue
		}
		delete(p.voter, id)
		p.out = append(p.out, ControlChange{Action: ControlRemove, Node: id, Why: why})
	}
}

// canRemoveVoter reports whether voter id may leave: the voters left keep
// a majority of live ones, and a death (rather than a removal the control
// group committed) shrinks them to no fewer than minControlVoters.
func (p *controlPlanner) canRemoveVoter(id NodeID) bool {
	voters, live := 0, 0
	for v, isVoter := range p.voter {
		if !isVoter || v == id {
			continue
		}
		voters++
		if p.live(v) {
			live++
		}
	}
	if voters == 0 || 2*live <= voters {
		return false
	}
	info, listed := p.m.Nodes[id]
	return !listed || info.State == NodeRemoved || voters >= minControlVoters
}

// GroupMember is one server of a shard group's Raft configuration.
type GroupMember struct {
	ID    NodeID
	Voter bool // false: a non-voter
}
