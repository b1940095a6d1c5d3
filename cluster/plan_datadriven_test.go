package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/hashicorp/raft"
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
//	plan                         the moves Plan returns, in order
//	converge                     plan and execute until the plan is empty
//	map                          replica sets (preferred leader first) and per-node counts
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
	c     *Control
	alive map[NodeID]bool
	dead  map[NodeID]bool
	index uint64
}

func newDDWorld(t *testing.T, td *datadriven.TestData) *ddWorld {
	var shards, replicas int
	td.ScanArgs(t, "shards", &shards)
	td.ScanArgs(t, "replicas", &replicas)
	w := newWorld(shards, replicas, nodeIDs(strings.Fields(td.Input))...)
	d := &ddWorld{c: NewControl(), alive: w.alive, dead: w.dead}
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

func (d *ddWorld) apply(t *testing.T, cmd Command) ApplyResult {
	b, err := cmd.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	d.index++
	return d.c.Apply(&raft.Log{Index: d.index, Type: raft.LogCommand, Data: b}).(ApplyResult)
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
	case "plan":
		var b strings.Builder
		for _, mv := range Plan(d.c.Map(), d.alive, func(id NodeID) bool { return d.dead[id] }) {
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

func (d *ddWorld) result(r ApplyResult) string {
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
	return fmt.Sprintf("s%d: %s", mv.Shard, strings.Join(parts, " "))
}

// converge executes plans through the FSM, add before remove, until the
// plan is empty.
func (d *ddWorld) converge(t *testing.T) string {
	moves, rounds := 0, 0
	for ; rounds < 5; rounds++ {
		plan := Plan(d.c.Map(), d.alive, func(id NodeID) bool { return d.dead[id] })
		if len(plan) == 0 {
			return fmt.Sprintf("%d moves in %d rounds\n%s", moves, rounds, d.show())
		}
		for _, mv := range plan {
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
	m := d.c.Map()
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
