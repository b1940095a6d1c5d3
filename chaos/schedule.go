package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// planned is one fault of a schedule. The schedule is a pure function of
// the seed and the settings (plan), so a seed replays the same faults on
// the same nodes at the same offsets; what a fault meets (which node leads
// what) depends on the run.
type planned struct {
	At      time.Duration `json:"at"` // from the start of the load; later if the previous fault's recovery took longer
	Kind    string        `json:"kind"`
	Variant string        `json:"variant"`
	Node    int           `json:"node"`            // target, from 0; -1: resolved when the fault starts (control-leader)
	Other   int           `json:"other"`           // a second node (one-way cut: Node stops sending to Other); -1 if none
	Group   []int         `json:"group,omitempty"` // split: the minority cut from the rest
	Hold    time.Duration `json:"hold"`
	Offset  time.Duration `json:"offset,omitempty"` // skew
}

func (p planned) String() string {
	s := fmt.Sprintf("%s/%s", p.Kind, p.Variant)
	switch {
	case p.Variant == "rolling-restart" || p.Kind == faultRestart:
		s += " every node"
	case p.Node < 0:
		s += " control-leader"
	case len(p.Group) > 0:
		s += fmt.Sprintf(" %v", nodeNames(p.Group))
	case p.Other >= 0:
		s += fmt.Sprintf(" n%d->n%d", p.Node+1, p.Other+1)
	default:
		s += fmt.Sprintf(" n%d", p.Node+1)
	}
	if p.Kind == faultSkew {
		s += fmt.Sprintf(" %+v", p.Offset)
	}
	return s + fmt.Sprintf(" for %v", p.Hold.Round(time.Millisecond))
}

// Margins of a schedule: no fault starts in the first warmup of the load
// or ends in its last cooldown.
const (
	warmup   = 3 * time.Second
	cooldown = 5 * time.Second
)

// plan is the fault schedule of c: faults one at a time, about
// c.FaultEvery apart, the kinds in shuffled cycles so that each appears
// as often as the others.
func plan(c config) []planned {
	if len(c.Faults) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0xfa17))
	var out []planned
	var cycle []string
	for at := warmup; ; {
		if len(cycle) == 0 {
			cycle = append([]string(nil), c.Faults...)
			rng.Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
		}
		p := pick(c, rng, cycle[0])
		if at+p.Hold > c.Duration-cooldown {
			return out
		}
		cycle = cycle[1:]
		p.At = at
		out = append(out, p)
		gap := c.FaultEvery/2 + time.Duration(rng.Int64N(int64(c.FaultEvery)))
		at += max(gap, p.Hold+time.Second).Round(time.Millisecond)
	}
}

// pick chooses one fault of kind.
func pick(c config, rng *rand.Rand, kind string) planned {
	secs := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(time.Second)).Round(time.Millisecond)
	}
	p := planned{Kind: kind, Node: rng.IntN(c.Nodes), Other: -1}
	switch kind {
	case faultKill:
		p.Variant, p.Hold = "kill-9", secs(1, 4)
	case faultPause:
		// SIGSTOP longer than the longest lease: a holder's lease ends
		// while its leader is stopped.
		p.Variant, p.Hold = "sigstop", maxLease+secs(0.5, 2.5)
	case faultPartition:
		p.Hold = secs(3, 6)
		switch rng.IntN(3) {
		case 0:
			p.Variant = "isolate"
		case 1:
			p.Variant, p.Group = "split", []int{p.Node}
			for _, i := range rng.Perm(c.Nodes) {
				if len(p.Group) < (c.Nodes-1)/2 && i != p.Node {
					p.Group = append(p.Group, i)
				}
			}
		default:
			p.Variant = "one-way"
			p.Other = (p.Node + 1 + rng.IntN(c.Nodes-1)) % c.Nodes
		}
	case faultSkew:
		p.Hold = secs(4, 8)
		if rng.IntN(3) == 0 {
			// Far behind: the node must grant no lease while it leads.
			p.Variant, p.Offset = "behind", -time.Duration(2+rng.IntN(8))*c.MaxOffset
		} else {
			// Within the bound: half of it either way, so that any two
			// nodes stay within it.
			p.Variant = "within"
			p.Offset = (time.Duration(rng.Int64N(int64(c.MaxOffset))) - c.MaxOffset/2).Round(time.Millisecond)
		}
	case faultDisk:
		p.Variant, p.Hold = "full", secs(2, 5)
	case faultRestart:
		// The whole cluster crashes (a power cut): every member killed
		// at once, all started again on their data.
		p.Variant, p.Node, p.Hold = "kill-9-all", -1, secs(1, 4)
	case faultChurn:
		variants := []string{"rolling-restart", "control-leader-kill"}
		if c.Nodes < maxNodes {
			variants = append(variants, "join-drain", "kill-during-move")
		}
		p.Variant = variants[rng.IntN(len(variants))]
		switch p.Variant {
		case "control-leader-kill":
			p.Node, p.Hold = -1, secs(1, 3)
		case "rolling-restart":
			p.Node, p.Hold = -1, 0
		default:
			p.Node, p.Hold = c.Nodes, 0 // the spare
		}
	}
	return p
}

// nodeNames are the ids of node indexes.
func nodeNames(idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, fmt.Sprintf("n%d", i+1))
	}
	return out
}
