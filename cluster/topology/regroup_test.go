package topology

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestPlanGroupsProperties: from a converged placement whose groups then
// drift from the map (a member missing, a member only a non-voter, a
// member the map does not list, a group not known), executing the plans
// round after round never removes a voter so that a group keeps no
// majority of live voters, never touches a shard whose group is unknown,
// and ends with every known group's voters equal to its map set.
func TestPlanGroupsProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		shards := rapid.IntRange(1, 6).Draw(rt, "shards")
		n := rapid.IntRange(3, 6).Draw(rt, "nodes")
		var ids []NodeID
		for i := range n {
			ids = append(ids, NodeID(fmt.Sprintf("n%02d", i)))
		}
		w := newWorld(shards, 3, ids...)
		w.converge(rt)
		groups := make([]map[NodeID]bool, shards) // nil: unknown
		for s, set := range w.m.ShardReplicas {
			g := map[NodeID]bool{}
			for _, id := range set {
				g[id] = true
			}
			switch rapid.IntRange(0, 4).Draw(rt, "drift") {
			case 1: // a member missing: an add cut short
				delete(g, rapid.SampledFrom(set).Draw(rt, "missing"))
			case 2: // a member still a non-voter
				g[rapid.SampledFrom(set).Draw(rt, "nonvoter")] = false
			case 3: // a member the map does not list
				g[rapid.SampledFrom(ids).Draw(rt, "extra")] = true
			case 4:
				g = nil
			}
			groups[s] = g
		}
		if rapid.Bool().Draw(rt, "death") {
			id := rapid.SampledFrom(ids).Draw(rt, "dead")
			w.alive[id], w.dead[id] = false, true
		}
		unknown := map[int]bool{}
		for s, g := range groups {
			unknown[s] = g == nil
		}
		for round := 0; ; round++ {
			if round == 6 {
				rt.Fatalf("no convergence in 6 rounds: map %v groups %v", w.m.ShardReplicas, groups)
			}
			plan := PlanGroups(w.m, w.alive, w.deadFor, observed(groups))
			if len(plan) == 0 {
				break
			}
			for _, mv := range plan {
				if unknown[mv.Shard] {
					rt.Fatalf("%v on a shard whose group is unknown", mv)
				}
				g := groups[mv.Shard]
				for _, id := range []NodeID{mv.Add, mv.Rejoin} {
					if id != "" {
						g[id] = true
					}
				}
				for _, id := range []NodeID{mv.Remove, mv.Evict} {
					if id == "" {
						continue
					}
					had := majority(w, g)
					delete(g, id)
					if had && !majority(w, g) {
						rt.Fatalf("%v leaves the group %v without a majority of live voters", mv, g)
					}
				}
				if !mv.regroups() {
					w.execute(rt, mv)
				}
			}
		}
		for s, g := range groups {
			if g == nil || !majority(w, g) {
				continue
			}
			var voters []NodeID
			for id, v := range g {
				if v {
					voters = append(voters, id)
				}
			}
			slices.Sort(voters)
			if want := sortedCopy(w.m.ShardReplicas[s]); !slices.Equal(voters, want) {
				rt.Fatalf("shard %d: group voters %v, map %v", s, voters, want)
			}
		}
	})
}

func observed(groups []map[NodeID]bool) []Group {
	out := make([]Group, len(groups))
	for s, g := range groups {
		if g == nil {
			continue
		}
		out[s].Known = true
		for _, id := range slices.Sorted(maps.Keys(g)) {
			if g[id] {
				out[s].Voters = append(out[s].Voters, id)
			} else {
				out[s].Nonvoters = append(out[s].Nonvoters, id)
			}
		}
	}
	return out
}

// majority reports whether the live voters of g are a majority of its
// voters.
func majority(w *world, g map[NodeID]bool) bool {
	voters, live := 0, 0
	for id, v := range g {
		if !v {
			continue
		}
		voters++
		if w.alive[id] && !w.dead[id] {
			live++
		}
	}
	return 2*live > voters
}
