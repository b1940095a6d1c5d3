package cluster

import (
	"slices"
)

// Plan computes the moves that bring m to a balanced placement. It is pure
// and deterministic: no I/O, no clock, no randomness, ties broken by node
// id, so every caller with the same inputs gets the same plan.
//
// alive is the gossip view (a node missing from it is not alive); deadFor
// reports whether a node has been dead longer than the grace period. Plan
// never modifies m. The moves are meant to be executed in order, one at a
// time, each add before remove (see Move); after executing some or all of
// them the control leader plans again from the new map.
//
// Rules, in the order the planner applies them:
//
//  1. Shrink: a shard with more than its target count (a move interrupted
//     between its halves, or fewer nodes) drops its surplus: dead replicas
//     first, then those on draining nodes, then the most loaded node's.
//  2. Repair: a replica on a node that is draining or dead past the grace
//     period is replaced by one on the least loaded eligible node (active,
//     alive, not dead past grace). With no replacement available, a dead
//     replica is dropped, and a live draining one only while the shard
//     keeps its target count.
//  3. Fill: a shard under its target count gains replicas on the least
//     loaded eligible nodes. The target is min(R, active nodes not dead past
//     grace).
//  4. Balance: while the replica counts of eligible nodes differ by more
//     than one, a replica moves from the most to the least loaded node.
//  5. Leaders: a shard whose preferred leader is not eligible gets an
//     eligible one; then preferred leaderships move along chains of shards
//     until their counts per eligible node differ by at most one.
//
// A node that is active and not alive but still within the grace period
// keeps its replicas and receives none: nothing moves on a suspicion alone.
// A shard's last replica never goes (its data would go with it), and a
// shard whose serving replicas are not a majority of its set is left alone
// (its group has no leader to change its configuration; that takes an
// operator).
func Plan(m *Map, alive map[NodeID]bool, deadFor func(NodeID) bool) []Move {
	p := newPlanner(m, alive, deadFor)
	p.shrink()
	p.repair()
	p.fill()
	p.balance()
	p.fixLeaders()
	p.balanceLeaders()
	return p.moves
}

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
}

func newPlanner(m *Map, alive map[NodeID]bool, deadFor func(NodeID) bool) *planner {
	p := &planner{w: m.Clone(), alive: alive, deadFor: deadFor, keep: map[NodeID]bool{}, load: map[NodeID]int{}, leads: map[NodeID]int{}}
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
// group needs a leader, so a majority of its replicas must serve. An empty
// set (before bootstrap) is created from scratch.
func (p *planner) canChange(s int) bool {
	n := len(p.w.ShardReplicas[s])
	return n == 0 || 2*p.liveCount(s) > n
}

// apply records mv and applies it to the working map.
func (p *planner) apply(mv Move) {
	set := p.w.ShardReplicas[mv.Shard]
	oldLeader := NodeID("")
	if len(set) > 0 {
		oldLeader = set[0]
	}
	if err := p.w.applyMove(mv); err != nil {
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
		if id == leaving || !p.isEligible(id) {
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
				if victim == "" || p.worse(id, victim) {
					victim = id
				}
			}
			p.apply(p.move(s, "", victim))
		}
	}
}

// worse reports whether a replica on a is a better one to drop than on b:
// dead before live, draining before active, then more loaded, then the
// larger id.
func (p *planner) worse(a, b NodeID) bool {
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
		if len(rs) == 0 || p.isEligible(rs[0]) {
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
			if len(rs) == 0 || rs[0] != u {
				continue
			}
			for _, v := range rs[1:] {
				if _, seen := prev[v]; seen || !p.isEligible(v) {
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
