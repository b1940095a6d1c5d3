package system_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// stepKind is one kind of membership step of TestMembershipRandomized.
type stepKind uint8

const (
	// stepJoin starts a new node, which joins; the planner gives it its
	// share of the replicas.
	stepJoin stepKind = iota
	// stepDrain drains an active node while more than R are active; once
	// the map says it is removed, it is stopped for good.
	stepDrain
	// stepDrainRefused asks to drain a node while exactly R are active:
	// the cluster must refuse (a shard would drop below R replicas) and
	// nothing may move.
	stepDrainRefused
	// stepKill kills a node (no hand-over), waits until others lead what
	// it led, and starts it again on its data.
	stepKill
	// stepRestart stops a node cleanly (it hands its leaderships over) and
	// starts it again.
	stepRestart
	// stepKillControlMidMove starts a move (a join, or a drain when the
	// cluster is at its node limit), kills the control group's leader
	// while a shard's group differs from its map replicas, and starts it
	// again once another node leads the control group.
	stepKillControlMidMove
	// stepIsolate cuts one node off the others (Net says which traffic),
	// waits until others lead what it led, and heals.
	stepIsolate
	numStepKinds
)

var stepNames = [...]string{"join", "drain", "drain-refused", "kill", "restart", "kill-control-mid-move", "isolate"}

func (k stepKind) String() string { return stepNames[k] }

// netKind is the traffic a stepIsolate cuts.
type netKind uint8

const (
	netRaft netKind = iota
	netGossip
	netBoth
)

var netNames = [...]string{"raft", "gossip", "raft+gossip"}

func (k netKind) String() string { return netNames[k] }

// controlLeader as a step's Node: the control group's leader when the step
// runs (the only target not known when the plan is made).
const controlLeader = -1

// step is one membership step. Node is the index of the node it acts on
// (for a join, the index the new node gets; controlLeader for the control
// group's leader); Move is the move a stepKillControlMidMove starts
// (stepJoin or stepDrain, on Node).
type step struct {
	Kind stepKind
	Node int
	Move stepKind
	Net  netKind
}

func (s step) String() string {
	node := fmt.Sprintf("node-%d", s.Node+1)
	if s.Node == controlLeader {
		node = "control-leader"
	}
	switch s.Kind {
	case stepKillControlMidMove:
		return fmt.Sprintf("%v(%v %s)", s.Kind, s.Move, node)
	case stepIsolate:
		return fmt.Sprintf("%v(%s, %v)", s.Kind, node, s.Net)
	default:
		return fmt.Sprintf("%v(%s)", s.Kind, node)
	}
}

// planLimits bound a plan: the cluster starts with Start nodes, keeps at
// least Replicas active (a drain below that is only asked to be refused)
// and at most Max.
type planLimits struct {
	Start, Replicas, Max int
}

// stepWeights are the relative chances of the kinds, among the legal ones.
var stepWeights = [numStepKinds]int{
	stepJoin: 3, stepDrain: 3, stepDrainRefused: 1, stepKill: 2, stepRestart: 1,
	stepKillControlMidMove: 2, stepIsolate: 3,
}

// planSteps is the membership steps of seed: a pure function of its
// arguments. It tracks which nodes are active and picks only legal steps:
// a drain only while more than lim.Replicas nodes are active (a refused
// drain exactly at lim.Replicas), a join only below lim.Max; kills,
// restarts and isolations bring their node back within the step, so at
// most one node is ever down or cut off.
func planSteps(seed uint64, n int, lim planLimits) []step {
	rng := rand.New(rand.NewPCG(seed, 0x6d656d62)) // "memb"
	active := make([]int, lim.Start)
	for i := range active {
		active[i] = i
	}
	next := lim.Start
	pick := func() int { return active[rng.IntN(len(active))] }
	out := make([]step, 0, n)
	for len(out) < n {
		kind := pickKind(rng, len(active), lim)
		st := step{Kind: kind}
		switch kind {
		case stepJoin:
			st.Node = next
			next++
			active = append(active, st.Node)
		case stepDrain:
			st.Node = pick()
			active = slices.DeleteFunc(active, func(i int) bool { return i == st.Node })
		case stepDrainRefused, stepRestart:
			st.Node = pick()
		case stepKill, stepIsolate:
			st.Node = pick()
			if rng.IntN(3) == 0 {
				st.Node = controlLeader
			}
			if kind == stepIsolate {
				st.Net = netKind(rng.IntN(3))
			}
		case stepKillControlMidMove:
			if len(active) < lim.Max {
				st.Move, st.Node = stepJoin, next
				next++
				active = append(active, st.Node)
			} else {
				st.Move, st.Node = stepDrain, pick()
				active = slices.DeleteFunc(active, func(i int) bool { return i == st.Node })
			}
		}
		out = append(out, st)
	}
	return out
}

// pickKind draws a kind legal with active nodes.
func pickKind(rng *rand.Rand, active int, lim planLimits) stepKind {
	legal := func(k stepKind) bool {
		switch k {
		case stepJoin:
			return active < lim.Max
		case stepDrain:
			return active > lim.Replicas
		case stepDrainRefused:
			return active == lim.Replicas
		case stepKillControlMidMove:
			return active < lim.Max || active > lim.Replicas
		}
		return true
	}
	total := 0
	for k := range numStepKinds {
		if legal(k) {
			total += stepWeights[k]
		}
	}
	x := rng.IntN(total)
	for k := range numStepKinds {
		if !legal(k) {
			continue
		}
		if x < stepWeights[k] {
			return k
		}
		x -= stepWeights[k]
	}
	panic("unreachable")
}

// formatPlan lists plan, marking step at (-1: none).
func formatPlan(plan []step, at int) string {
	var b strings.Builder
	for k, st := range plan {
		mark := "  "
		if k == at {
			mark = "->"
		}
		fmt.Fprintf(&b, "%s %d. %v\n", mark, k+1, st)
	}
	return b.String()
}
