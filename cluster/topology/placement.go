package topology

import (
	"fmt"
	"maps"
	"slices"
)

// Plan is PlanGroups for shard groups that are exactly what the map says
// (MapGroups): the placement of a cluster whose every move has completed,
// such as a new one.
func Plan(m *Map, alive map[NodeID]bool, deadFor func(NodeID) bool) []Move {
	return PlanGroups(m, alive, deadFor, MapGroups(m))
}

// PlanGroups computes the moves that repair the shard groups and then
// bring m to a balanced placement. It is pure and deterministic: no I/O,
// no clock, no randomness, ties broken by node id, so every caller with
// the same inputs gets the same plan.
//
// alive is the gossip view (a node missing from it is not alive); deadFor
// reports whether a node has been dead longer than the grace period;
// groups[s] is shard s's group as observed (a shard beyond len(groups) is
// unknown). PlanGroups modifies none of them. The moves are meant to be
// executed in order, one at a time, each add before remove (see Move);
// after executing some or all of them the control leader observes the
// groups and plans again.
//
// Rules, in the order the planner applies them:
//
//  1. Shrink: a shard with more than its target count (a move interrupted
//     between its halves, or fewer nodes) drops its surplus: replicas its
//     group does not count as voters first, then dead ones, then those on
//     draining nodes, then the most loaded node's.
//  2. Regroup: a map member that is not a voter of its group is added
//     again (Rejoin: non-voter, catch up, voter) while it is eligible, and
//     dropped from the map otherwise; a group member the map does not list
//     is removed from the group (Evict), unless that would leave the group
//     without a majority of live voters.
//  3. Repair: a replica on a node that is draining or dead past the grace
//     period is replaced by one on the least loaded eligible node (active,
//     alive, not dead past grace). With no replacement available, a dead
//     replica is dropped, and a live draining one only while the shard
//     keeps its target count.
//  4. Fill: a shard under its target count gains replicas on the least
//     loaded eligible nodes. The target is min(R, active nodes not dead past
//     grace).
//  5. Balance: while the replica counts of eligible nodes differ by more
//     than one, a replica moves from the most to the least loaded node.
//  6. Leaders: a shard whose preferred leader is not eligible gets an
//     eligible one; then preferred leaderships move along chains of shards
//     until their counts per eligible node differ by at most one.
//
// A node that is active and not alive but still within the grace period
// keeps its replicas and receives none: nothing moves on a suspicion alone.
// A shard's last replica never goes (its data would go with it). A shard
// whose group is unknown (no leader answered with a committed
// configuration), or whose group's live voters are not a majority of its
// voters, is left alone: its group has no leader to change its
// configuration (that takes an operator, or time). A shard with no replica
// at all is given its first one.
func PlanGroups(m *Map, alive map[NodeID]bool, deadFor func(NodeID) bool, groups []Group) []Move {
	p := newPlanner(m, alive, deadFor, groups)
	p.shrink()
	p.regroup()
	p.repair()
	p.fill()
	p.balance()
	p.fixLeaders()
	p.balanceLeaders()
	return p.moves
}

// Group is a shard group's Raft configuration as the control leader
// observed it. Known is false when no leader answered with a committed
// configuration; Voters and Nonvoters are then meaningless.
type Group struct {
	Known     bool
	Voters    []NodeID
	Nonvoters []NodeID
}

// MapGroups returns, for every shard of m, a known group whose voters are
// exactly the map's replica set.
func MapGroups(m *Map) []Group {
	out := make([]Group, len(m.ShardReplicas))
	for s, set := range m.ShardReplicas {
		out[s] = Group{Known: true, Voters: slices.Clone(set)}
	}
	return out
}

// group is the planner's working copy of one shard's group: what it will
// be once the moves planned so far are executed.
type group struct {
	known  bool
	voters map[NodeID]bool // true: voter, false: non-voter
}

func (g *group) isVoter(id NodeID) bool { return g.known && g.voters[id] }

type planner struct {
	w        *Map
	alive    map[NodeID]bool
	deadFor  func(NodeID) bool
	keep     map[NodeID]bool // a replica there may stay
	eligible []NodeID        // may receive replicas and lead, sorted
	target   int
	load     map[NodeID]int
	leads    map[NodeID]int
	moves    []Move
	groups   []group // per shard
}

func newPlanner(m *Map, alive map[NodeID]bool, deadFor func(NodeID) bool, groups []Group) *planner {
	p := &planner{w: m.Clone(), alive: alive, deadFor: deadFor, keep: map[NodeID]bool{}, load: map[NodeID]int{}, leads: map[NodeID]int{}}
	p.groups = make([]group, len(p.w.ShardReplicas))
	for s := range p.groups {
		if s >= len(groups) || !groups[s].Known {
			continue
		}
		g := group{known: true, voters: map[NodeID]bool{}}
		for _, id := range groups[s].Nonvoters {
			g.voters[id] = false
		}
		for _, id := range groups[s].Voters {
			g.voters[id] = true
		}
		p.groups[s] = g
	}
	counted := 0
	for _, id := range p.w.sortedNodeIDs() {
		if p.w.Nodes[id].State != NodeActive || deadFor(id) {
			continue
		}
		counted++
		p.keep[id] = true
		if alive[id] {
			p.eligible = append(p.eligible, id)
		}
	}
	p.target = min(p.w.Replicas, counted)
	for _, rs := range p.w.ShardReplicas {
		for i, id := range rs {
			p.load[id]++
			if i == 0 {
				p.leads[id]++
			}
		}
	}
	return p
}

// live reports whether a replica on id serves: the node is alive, not dead
// past grace, and active or draining.
func (p *planner) live(id NodeID) bool {
	st := p.w.Nodes[id].State
	return p.alive[id] && !p.deadFor(id) && (st == NodeActive || st == NodeDraining)
}

func (p *planner) liveCount(s int) int {
	n := 0
	for _, id := range p.w.ShardReplicas[s] {
		if p.live(id) {
			n++
		}
	}
	return n
}

// canChange reports whether shard s can change its replica set: its Raft
// group needs a leader, so its group must be known and a majority of its
// voters must serve. An empty set (before bootstrap) is created from
// scratch.
func (p *planner) canChange(s int) bool {
	if len(p.w.ShardReplicas[s]) == 0 {
		return true
	}
	g := p.groups[s]
	if !g.known {
		return false
	}
	voters, live := p.voterCount(s, "")
	return 2*live > voters
}

// voterCount counts shard s's group voters, and the live ones among them,
// leaving out without.
func (p *planner) voterCount(s int, without NodeID) (voters, live int) {
	for id, voter := range p.groups[s].voters {
		if !voter || id == without {
			continue
		}
		voters++
		if p.live(id) {
			live++
		}
	}
	return voters, live
}

// apply records mv and applies it to the working map and groups: once
// executed, an added or rejoined replica is a voter, a removed or evicted
// one is no member.
func (p *planner) apply(mv Move) {
	g := &p.groups[mv.Shard]
	if g.voters == nil {
		g.voters = map[NodeID]bool{}
	}
	for _, id := range []NodeID{mv.Add, mv.Rejoin} {
		if id != "" {
			g.voters[id] = true
		}
	}
	for _, id := range []NodeID{mv.Remove, mv.Evict} {
		delete(g.voters, id)
	}
	if mv.Rejoin != "" || mv.Evict != "" {
		p.moves = append(p.moves, mv) // the map does not change
		return
	}
	set := p.w.ShardReplicas[mv.Shard]
	oldLeader := NodeID("")
	if len(set) > 0 {
		oldLeader = set[0]
	}
	if err := p.w.ApplyMove(mv); err != nil {
		panic("cluster: planner made an invalid move: " + err.Error())
	}
	if mv.Add != "" {
		p.load[mv.Add]++
	}
	if mv.Remove != "" {
		p.load[mv.Remove]--
	}
	if set = p.w.ShardReplicas[mv.Shard]; len(set) > 0 && set[0] != oldLeader {
		p.leads[oldLeader]--
		p.leads[set[0]]++
	} else if len(set) == 0 && oldLeader != "" {
		p.leads[oldLeader]--
	}
	p.moves = append(p.moves, mv)
}

// leastLoaded returns the eligible node with the fewest replicas that holds
// none of shard s, or "".
func (p *planner) leastLoaded(s int) NodeID {
	best := NodeID("")
	for _, id := range p.eligible {
		if slices.Contains(p.w.ShardReplicas[s], id) {
			continue
		}
		if best == "" || p.load[id] < p.load[best] {
			best = id
		}
	}
	return best
}

// leastLeading returns the eligible node leading the fewest shards, then
// holding the fewest replicas, or "".
func (p *planner) leastLeading() NodeID {
	best := NodeID("")
	for _, id := range p.eligible {
		if best == "" || p.leads[id] < p.leads[best] || p.leads[id] == p.leads[best] && p.load[id] < p.load[best] {
			best = id
		}
	}
	return best
}

// successor picks the preferred leader to take over when leader leaves
// shard s (with add joining): the eligible replica leading fewest shards.
func (p *planner) successor(s int, leaving, add NodeID) NodeID {
	cands := slices.Clone(p.w.ShardReplicas[s])
	if add != "" {
		cands = append(cands, add)
	}
	slices.Sort(cands)
	best := NodeID("")
	for _, id := range cands {
		if id == leaving || !p.isEligible(id) || id != add && !p.groups[s].isVoter(id) {
			continue
		}
		if best == "" || p.leads[id] < p.leads[best] {
			best = id
		}
	}
	return best
}

func (p *planner) isEligible(id NodeID) bool {
	_, ok := slices.BinarySearch(p.eligible, id)
	return ok
}

// move builds a move of shard s, choosing a successor when it takes the
// preferred leader away.
func (p *planner) move(s int, add, remove NodeID) Move {
	mv := Move{Shard: s, Add: add, Remove: remove}
	set := p.w.ShardReplicas[s]
	if remove != "" && set[0] == remove || len(set) == 0 {
		mv.Leader = p.successor(s, remove, add)
	}
	return mv
}

func (p *planner) repair() {
	for s := range p.w.ShardReplicas {
		for _, id := range slices.Clone(p.w.ShardReplicas[s]) {
			if p.keep[id] || !p.canChange(s) {
				continue
			}
			if t := p.leastLoaded(s); t != "" {
				p.apply(p.move(s, t, id))
				continue
			}
			if len(p.w.ShardReplicas[s]) > 1 && (!p.live(id) || p.liveCount(s)-1 >= p.target) {
				p.apply(p.move(s, "", id))
			}
		}
	}
}

func (p *planner) shrink() {
	for s := range p.w.ShardReplicas {
		for len(p.w.ShardReplicas[s]) > max(p.target, 1) && p.canChange(s) {
			victim := NodeID("")
			for _, id := range p.w.ShardReplicas[s] {
				if victim == "" || p.worse(s, id, victim) {
					victim = id
				}
			}
			p.apply(p.move(s, "", victim))
		}
	}
}

// worse reports whether shard s's replica on a is a better one to drop
// than on b: one its group does not count as a voter before a voter, dead
// before live, draining before active, then more loaded, then the larger
// id.
func (p *planner) worse(s int, a, b NodeID) bool {
	if va, vb := p.groups[s].isVoter(a), p.groups[s].isVoter(b); va != vb {
		return !va
	}
	if la, lb := p.live(a), p.live(b); la != lb {
		return !la
	}
	if ka, kb := p.keep[a], p.keep[b]; ka != kb {
		return !ka
	}
	if p.load[a] != p.load[b] {
		return p.load[a] > p.load[b]
	}
	return a > b
}

// regroup makes each shard's group and map set agree (see PlanGroups,
// rule 2): re-adds or drops map members that are not voters, then evicts
// group members the map does not list while a majority of live voters
// remains.
func (p *planner) regroup() {
	for s := range p.w.ShardReplicas {
		if len(p.w.ShardReplicas[s]) == 0 || !p.canChange(s) {
			continue
		}
		for _, id := range slices.Clone(p.w.ShardReplicas[s]) {
			switch {
			case p.groups[s].isVoter(id):
			case p.isEligible(id):
				p.apply(Move{Shard: s, Rejoin: id})
			case len(p.w.ShardReplicas[s]) > 1:
				p.apply(p.move(s, "", id))
			}
		}
		for _, id := range slices.Sorted(maps.Keys(p.groups[s].voters)) {
			if slices.Contains(p.w.ShardReplicas[s], id) {
				continue
			}
			if p.groups[s].voters[id] {
				voters, live := p.voterCount(s, id)
				if voters == 0 || 2*live <= voters {
					continue
				}
			}
			p.apply(Move{Shard: s, Evict: id})
		}
	}
}

func (p *planner) fill() {
	for s := range p.w.ShardReplicas {
		for len(p.w.ShardReplicas[s]) < p.target && p.canChange(s) {
			t := p.leastLoaded(s)
			if len(p.w.ShardReplicas[s]) == 0 {
				t = p.leastLeading() // the first replica leads
			}
			if t == "" {
				break
			}
			p.apply(p.move(s, t, ""))
		}
	}
}

// balance moves replicas from the most to the least loaded eligible node
// until their counts differ by at most one. The most loaded node always
// holds a shard the least loaded lacks (it holds at least two more), and
// every move lowers the sum of squared loads, so the loop ends.
func (p *planner) balance() {
	for len(p.eligible) > 1 {
		hi, lo := p.eligible[0], p.eligible[0]
		for _, id := range p.eligible {
			if p.load[id] > p.load[hi] {
				hi = id
			}
			if p.load[id] < p.load[lo] {
				lo = id
			}
		}
		if p.load[hi]-p.load[lo] <= 1 {
			return
		}
		s := p.shardToShed(hi, lo)
		if s < 0 {
			return
		}
		p.apply(p.move(s, lo, hi))
	}
}

// shardToShed picks a shard on hi that lo lacks, preferring one that hi
// does not lead (no leadership change), then the lowest shard id.
func (p *planner) shardToShed(hi, lo NodeID) int {
	pick := -1
	for s, rs := range p.w.ShardReplicas {
		if !slices.Contains(rs, hi) || slices.Contains(rs, lo) || !p.canChange(s) {
			continue
		}
		if rs[0] != hi {
			return s
		}
		if pick < 0 {
			pick = s
		}
	}
	return pick
}

// fixLeaders gives every shard whose preferred leader cannot lead (not
// alive, draining, dead past grace) an eligible one when it has one.
func (p *planner) fixLeaders() {
	for s, rs := range p.w.ShardReplicas {
		if len(rs) == 0 || p.isEligible(rs[0]) || !p.canChange(s) {
			continue
		}
		if c := p.successor(s, rs[0], ""); c != "" {
			p.apply(Move{Shard: s, Leader: c})
		}
	}
}

// balanceLeaders evens out preferred leaderships over eligible nodes. A
// node leading too many shards hands one on along a chain of shards
// (u leads s, v holds a replica of s: v may lead s instead) that ends at a
// node leading at least two fewer; each chain lowers the sum of squared
// counts, so the loop ends.
func (p *planner) balanceLeaders() {
	for p.shiftLeaders() {
	}
}

func (p *planner) shiftLeaders() bool {
	if len(p.eligible) < 2 {
		return false
	}
	order := slices.Clone(p.eligible)
	slices.SortStableFunc(order, func(a, b NodeID) int { return p.leads[b] - p.leads[a] })
	low := p.leads[order[len(order)-1]]
	for _, src := range order {
		if p.leads[src] < low+2 {
			return false
		}
		if path := p.leaderChain(src); path != nil {
			for _, mv := range path {
				p.apply(mv)
			}
			return true
		}
	}
	return false
}

// leaderChain searches breadth first, in shard and id order, for a chain
// of leadership hand-overs from src to a node leading at least two fewer
// shards, and returns it as leader-only moves (nil if there is none).
func (p *planner) leaderChain(src NodeID) []Move {
	type edge struct {
		shard int
		from  NodeID
	}
	prev := map[NodeID]edge{src: {shard: -1}}
	queue := []NodeID{src}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for s, rs := range p.w.ShardReplicas {
			if len(rs) == 0 || rs[0] != u || !p.canChange(s) {
				continue
			}
			for _, v := range rs[1:] {
				if _, seen := prev[v]; seen || !p.isEligible(v) || !p.groups[s].isVoter(v) {
					continue
				}
				prev[v] = edge{shard: s, from: u}
				if p.leads[v] <= p.leads[src]-2 {
					var path []Move
					for at := v; at != src; at = prev[at].from {
						path = append(path, Move{Shard: prev[at].shard, Leader: at})
					}
					return path
				}
				queue = append(queue, v)
			}
		}
	}
	return nil
}

// InitialSets returns m with the replica sets the planner converges to
// from m (every node alive): its moves, the first of each shard per round
// as the executor runs them, applied until it plans none. Pure.
func InitialSets(m *Map) *Map {
	m = m.Clone()
	alive := map[NodeID]bool{}
	for id := range m.Nodes {
		alive[id] = true
	}
	never := func(NodeID) bool { return false }
	for range 4 * (m.Replicas + 2) * max(1, len(m.Nodes)) {
		moves := Plan(m, alive, never)
		if len(moves) == 0 {
			break
		}
		seen := map[int]bool{}
		for _, mv := range moves {
			if seen[mv.Shard] {
				continue
			}
			seen[mv.Shard] = true
			if err := m.ApplyMove(mv); err != nil {
				panic(fmt.Sprintf("cluster: initial placement: %v: %v", mv, err))
			}
		}
	}
	m.Generation = nil // every shard at its creation set
	return m
}
