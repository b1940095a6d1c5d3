package system_test

import (
	"slices"
	"testing"
)

// TestMembershipPlanIsLegal checks the step generator as data: a plan is a
// pure function of its seed, and replayed on a model of the cluster's
// active nodes every step is legal (drains keep R active nodes, except a
// refused one at exactly R; joins stay within the node limit and get the
// next index; kills, restarts and isolations hit an active node or the
// control leader), and over the seeds of a -long run every kind, every
// network cut and both moves of a mid-move kill occur.
func TestMembershipPlanIsLegal(t *testing.T) {
	lim := planLimits{Start: 3, Replicas: 3, Max: 5}
	kinds := map[stepKind]int{}
	nets := map[netKind]int{}
	moves := map[stepKind]int{}
	for seed := uint64(1); seed <= 200; seed++ {
		plan := planSteps(seed, 8, lim)
		if again := planSteps(seed, 8, lim); !slices.Equal(plan, again) {
			t.Fatalf("seed %d: two plans differ:\n%s\n%s", seed, formatPlan(plan, -1), formatPlan(again, -1))
		}
		if len(plan) != 8 {
			t.Fatalf("seed %d: %d steps, want 8", seed, len(plan))
		}
		active := []int{0, 1, 2}
		next := 3
		for k, st := range plan {
			kinds[st.Kind]++
			bad := func(why string) {
				t.Fatalf("seed %d step %d: %s; active %v\n%s", seed, k+1, why, active, formatPlan(plan, k))
			}
			isActive := slices.Contains(active, st.Node)
			move := st.Kind
			if st.Kind == stepKillControlMidMove {
				move = st.Move
				moves[move]++
			}
			switch move {
			case stepJoin:
				if st.Node != next || len(active) >= lim.Max {
					bad("join past the limit or out of order")
				}
				next++
				active = append(active, st.Node)
			case stepDrain:
				if !isActive || len(active) <= lim.Replicas {
					bad("drain of an inactive node or below R")
				}
				active = slices.DeleteFunc(active, func(i int) bool { return i == st.Node })
			case stepDrainRefused:
				if !isActive || len(active) != lim.Replicas {
					bad("refused drain with other than R active nodes")
				}
			case stepRestart:
				if !isActive {
					bad("restart of an inactive node")
				}
			case stepKill, stepIsolate:
				if !isActive && st.Node != controlLeader {
					bad("fault on an inactive node")
				}
				if st.Kind == stepIsolate {
					nets[st.Net]++
				}
			default:
				bad("unknown kind")
			}
		}
	}
	for k := range numStepKinds {
		if kinds[k] == 0 {
			t.Errorf("no %v step in 200 plans", k)
		}
	}
	for _, n := range []netKind{netRaft, netGossip, netBoth} {
		if nets[n] == 0 {
			t.Errorf("no %v isolation in 200 plans", n)
		}
	}
	if moves[stepJoin] == 0 || moves[stepDrain] == 0 {
		t.Errorf("mid-move kills: %v, want both joins and drains", moves)
	}
	t.Logf("steps in 200 plans of 8: %v; isolations %v; mid-move kills %v", kinds, nets, moves)
}
