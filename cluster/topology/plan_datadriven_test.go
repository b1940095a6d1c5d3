package topology

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"maps"

	"github.com/cockroachdb/datadriven"
)

// TestPlanDataDriven runs the scripts under testdata/plan: placement stated
// as data, with every move executed through the control FSM the way the
// control leader does (add, then remove). Regenerate with
//
//	go test ./cluster/ -run TestPlanDataDriven -rewrite
//
// and read every changed line against the rules in Plan's doc comment.
//
//	init shards=N replicas=R     bootstrap the map; input: the node ids
//	join ID                      CmdNodeJoin; the node is alive
//	silent ID                    missing from gossip, within the grace period
//	dead ID                      missing longer than the grace period
//	back ID                      alive again
//	drain ID / remove ID         CmdNodeDrain / CmdNodeRemove
//	group S voters=(..) [nonvoters=(..)] | group S unknown
//	                             shard S's observed group from now on (until
//	                             then it is the map's set, all voters)
//	commit S [add=ID] [remove=ID] a half move committed to the map only
//	plan                         the moves PlanGroups returns, in order
//	converge                     plan and execute until the plan is empty:
//	                             map halves through the FSM, and the
//	                             observed groups follow every move
//	map                          replica sets (preferred leader first), the
//	                             observed groups that differ, per-node counts
func TestPlanDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/plan", func(t *testing.T, path string) {
		var d *ddWorld
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if td.Cmd == "init" {
				d = newDDWorld(t, td)
				return d.show()
			}
			return d.run(t, td)
		})
	})
}

type ddWorld struct {
	m     *Map // nil before bootstrap
	alive map[NodeID]bool
	dead  map[NodeID]bool
	// groups holds the shards whose observed group was set by the script;
	// the others' groups are their map sets.
	groups map[int]*Group
}

func newDDWorld(t *testing.T, td *datadriven.TestData) *ddWorld {
	var shards, replicas int
	td.ScanArgs(t, "shards", &shards)
	td.ScanArgs(t, "replicas", &replicas)
	w := newWorld(shards, replicas, nodeIDs(strings.Fields(td.Input))...)
	d := &ddWorld{alive: w.alive, dead: w.dead, groups: map[int]*Group{}}
	d.apply(t, Command{Type: CmdBootstrap, Map: w.m})
	return d
}

func nodeIDs(ss []string) []NodeID {
	out := make([]NodeID, len(ss))
	for i, s := range ss {
		out[i] = NodeID(s)
	}
	return out
}

// applied is the outcome of one command: the map's epoch after it, and the
// error of a rejected one.
type applied struct {
	Epoch uint64
	Err   error
}

// apply runs cmd through its encoding and Apply, as the control group does.
func (d *ddWorld) apply(t *testing.T, cmd Command) applied {
	b, err := cmd.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if cmd, err = DecodeCommand(b); err != nil {
		t.Fatal(err)
	}
	next, err := Apply(d.m, cmd)
	if next != nil {
		d.m = next
	}
	r := applied{Err: err}
	if d.m != nil {
		r.Epoch = d.m.Epoch
	}
	return r
}

func (d *ddWorld) run(t *testing.T, td *datadriven.TestData) string {
	id := NodeID("")
	if len(td.CmdArgs) > 0 {
		id = NodeID(td.CmdArgs[0].Key)
	}
	switch td.Cmd {
	case "join":
		d.alive[id], d.dead[id] = true, false
		return d.result(d.apply(t, Command{Type: CmdNodeJoin, Node: testNode(id)}))
	case "silent":
		d.alive[id] = false
		return "ok"
	case "dead":
		d.alive[id], d.dead[id] = false, true
		return "ok"
	case "back":
		d.alive[id], d.dead[id] = true, false
		return "ok"
	case "drain":
		return d.result(d.apply(t, Command{Type: CmdNodeDrain, ID: id}))
	case "remove":
		return d.result(d.apply(t, Command{Type: CmdNodeRemove, ID: id}))
	case "group":
		return d.setGroup(t, td)
	case "commit":
		var s int
		fmt.Sscan(td.CmdArgs[0].Key, &s)
		mv := Move{Shard: s}
		for _, a := range td.CmdArgs[1:] {
			switch a.Key {
			case "add":
				mv.Add = NodeID(a.Vals[0])
			case "remove":
				mv.Remove = NodeID(a.Vals[0])
			}
		}
		return d.result(d.apply(t, Command{Type: CmdApplyMove, Move: mv}))
	case "plan":
		var b strings.Builder
		for _, mv := range d.plan() {
			fmt.Fprintln(&b, showMove(mv))
		}
		if b.Len() == 0 {
			return "no moves"
		}
		return b.String()
	case "converge":
		return d.converge(t)
	case "map":
		return d.show()
	}
	t.Fatalf("unknown command %q", td.Cmd)
	return ""
}

func (d *ddWorld) result(r applied) string {
	if r.Err != nil {
		return fmt.Sprintf("epoch %d: %v", r.Epoch, r.Err)
	}
	return fmt.Sprintf("epoch %d", r.Epoch)
}

func showMove(mv Move) string {
	var parts []string
	if mv.Add != "" {
		parts = append(parts, "+"+string(mv.Add))
	}
	if mv.Remove != "" {
		parts = append(parts, "-"+string(mv.Remove))
	}
	if mv.Leader != "" {
		parts = append(parts, "leader="+string(mv.Leader))
	}
	if mv.Rejoin != "" {
		parts = append(parts, "rejoin="+string(mv.Rejoin))
	}
	if mv.Evict != "" {
		parts = append(parts, "evict="+string(mv.Evict))
	}
	return fmt.Sprintf("s%d: %s", mv.Shard, strings.Join(parts, " "))
}

// converge executes plans through the FSM, add before remove, until the
// plan is empty.
func (d *ddWorld) converge(t *testing.T) string {
	moves, rounds := 0, 0
	for ; rounds < 5; rounds++ {
		plan := d.plan()
		if len(plan) == 0 {
			return fmt.Sprintf("%d moves in %d rounds\n%s", moves, rounds, d.show())
		}
		for _, mv := range plan {
			d.follow(mv)
			if mv.regroups() {
				moves++
				continue
			}
			halves := []Move{mv}
			if mv.Add != "" && mv.Remove != "" {
				halves = []Move{{Shard: mv.Shard, Add: mv.Add}, {Shard: mv.Shard, Remove: mv.Remove, Leader: mv.Leader}}
			}
			for _, h := range halves {
				if r := d.apply(t, Command{Type: CmdApplyMove, Move: h}); r.Err != nil {
					t.Fatalf("%v: %v", h, r.Err)
				}
			}
			moves++
		}
	}
	t.Fatalf("no convergence in %d rounds", rounds)
	return ""
}

func (d *ddWorld) show() string {
	m := d.m.Clone()
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d\n", m.Epoch)
	load, leads := map[NodeID]int{}, map[NodeID]int{}
	for s, rs := range m.ShardReplicas {
		fmt.Fprintf(&b, "s%d:", s)
		for i, id := range rs {
			load[id]++
			if i == 0 {
				leads[id]++
				fmt.Fprintf(&b, " [%s]", id)
			} else {
				fmt.Fprintf(&b, " %s", id)
			}
		}
		b.WriteString("\n")
	}
	for _, s := range slices.Sorted(maps.Keys(d.groups)) {
		fmt.Fprintf(&b, "group s%d: %s\n", s, showGroup(*d.groups[s]))
	}
	for _, id := range slices.Sorted(func(yield func(NodeID) bool) {
		for id := range m.Nodes {
			if !yield(id) {
				return
			}
		}
	}) {
		gossip := "alive"
		switch {
		case d.dead[id]:
			gossip = "dead"
		case !d.alive[id]:
			gossip = "silent"
		}
		fmt.Fprintf(&b, "%s: %s %s replicas=%d leads=%d\n", id, m.Nodes[id].State, gossip, load[id], leads[id])
	}
	return b.String()
}

func (d *ddWorld) plan() []Move {
	m := d.m.Clone()
	groups := MapGroups(m)
	for s, g := range d.groups {
		groups[s] = *g
	}
	return PlanGroups(m, d.alive, func(id NodeID) bool { return d.dead[id] }, groups)
}

func (d *ddWorld) setGroup(t *testing.T, td *datadriven.TestData) string {
	var s int
	if _, err := fmt.Sscan(td.CmdArgs[0].Key, &s); err != nil {
		t.Fatalf("group: shard %q: %v", td.CmdArgs[0].Key, err)
	}
	g := &Group{}
	for _, a := range td.CmdArgs[1:] {
		switch a.Key {
		case "unknown":
		case "voters":
			g.Known, g.Voters = true, nodeIDs(a.Vals)
		case "nonvoters":
			g.Known, g.Nonvoters = true, nodeIDs(a.Vals)
		default:
			t.Fatalf("group: unknown argument %q", a.Key)
		}
	}
	d.groups[s] = g
	return showGroup(*g)
}

// follow changes the observed group of mv's shard, if the script set one,
// as executing mv would: an added or rejoined node becomes a voter, a
// removed or evicted one leaves.
func (d *ddWorld) follow(mv Move) {
	g := d.groups[mv.Shard]
	if g == nil || !g.Known {
		return
	}
	drop := func(ids []NodeID, id NodeID) []NodeID {
		return slices.DeleteFunc(ids, func(x NodeID) bool { return x == id })
	}
	for _, id := range []NodeID{mv.Add, mv.Rejoin} {
		if id != "" && !slices.Contains(g.Voters, id) {
			g.Nonvoters = drop(g.Nonvoters, id)
			g.Voters = append(g.Voters, id)
			slices.Sort(g.Voters)
		}
	}
	for _, id := range []NodeID{mv.Remove, mv.Evict} {
		if id != "" {
			g.Voters, g.Nonvoters = drop(g.Voters, id), drop(g.Nonvoters, id)
		}
	}
}

func showGroup(g Group) string {
	if !g.Known {
		return "unknown"
	}
	out := "voters=" + strings.Join(ids2str(g.Voters), ",")
	if len(g.Nonvoters) > 0 {
		out += " nonvoters=" + strings.Join(ids2str(g.Nonvoters), ",")
	}
	return out
}

func ids2str(ids []NodeID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}
