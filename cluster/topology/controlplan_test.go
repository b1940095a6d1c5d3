package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestPlanControlDataDriven runs the scripts under testdata/control: the
// control group's membership stated as data. Regenerate with
//
//	go test ./cluster/ -run TestPlanControlDataDriven -rewrite
//
// and read every changed line against PlanControl's rules.
//
//	plan self=ID                 the changes PlanControl returns; input, a
//	                             line per node: ID STATE GOSSIP MEMBERSHIP
//	                             with STATE active, draining, removed or
//	                             absent (not in the map), GOSSIP alive,
//	                             silent (within the grace period) or dead
//	                             (past it), MEMBERSHIP voter, nonvoter or -
func TestPlanControlDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/control", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if td.Cmd != "plan" {
				t.Fatalf("unknown command %q", td.Cmd)
			}
			var self string
			td.ScanArgs(t, "self", &self)
			m, members, alive, dead := parseControl(t, td.Input)
			var b strings.Builder
			for _, c := range PlanControl(m, NodeID(self), members, alive, func(id NodeID) bool { return dead[id] }) {
				fmt.Fprintf(&b, "%s %s: %s\n", c.Action, c.Node, c.Why)
			}
			if b.Len() == 0 {
				return "no changes"
			}
			return b.String()
		})
	})
}

func parseControl(t *testing.T, input string) (*Map, []GroupMember, map[NodeID]bool, map[NodeID]bool) {
	m := &Map{Slots: 4, Shards: 1, Replicas: 3, Nodes: map[NodeID]NodeInfo{}, ShardReplicas: make([][]NodeID, 1)}
	var members []GroupMember
	alive, dead := map[NodeID]bool{}, map[NodeID]bool{}
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("line %q: want ID STATE GOSSIP MEMBERSHIP", line)
		}
		id := NodeID(f[0])
		if f[1] != "absent" {
			info := testNode(id)
			if err := info.State.UnmarshalText([]byte(f[1])); err != nil {
				t.Fatal(err)
			}
			m.Nodes[id] = info
		}
		switch f[2] {
		case "alive":
			alive[id] = true
		case "dead":
			dead[id] = true
		case "silent":
		default:
			t.Fatalf("line %q: gossip %q", line, f[2])
		}
		switch f[3] {
		case "voter", "nonvoter":
			members = append(members, GroupMember{ID: id, Voter: f[3] == "voter"})
		case "-":
		default:
			t.Fatalf("line %q: membership %q", line, f[3])
		}
	}
	return m, members, alive, dead
}
