package api_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// TestStaleFenceRefusedOnRealNodes: on a real 3-node cluster, the control
// leader's node stops, so the others elect a new control leader in a later
// term. A shard admin request fenced by the old term, as a deposed control
// leader would send it, is refused by the shard's leader with
// ErrStaleFence, and the group is unchanged; the same request under the
// current term goes through. Status reports each node active and ready.
func TestStaleFenceRefusedOnRealNodes(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Shards: 2})
	for i := range 3 {
		testwait.For(t, 20*time.Second, "node status active and ready", func() bool {
			st, err := gridtest.Dial(t, c.Addrs()[i]).Status(gridtest.Context(t), &gridpb.StatusRequest{})
			return err == nil && st.NodeState == "active" && st.Ready
		})
	}
	old := c.Map()
	ctl := c.Index(string(c.Node(0).Cluster().ControlLeader()))
	if ctl < 0 {
		t.Fatal("no control leader")
	}
	oldTerm := c.Node(ctl).Cluster().ControlTerm()
	c.Stop(ctl)
	var live []int
	for i := range 3 {
		if i != ctl {
			live = append(live, i)
		}
	}
	testwait.For(t, 20*time.Second, "a new control leader in a later term", func() bool {
		for _, i := range live {
			cn := c.Node(i).Cluster()
			if cn.ControlTerm() <= oldTerm || cn.ControlLeader() == "" || cn.ControlLeader() == topology.NodeID(c.ID(ctl)) {
				return false
			}
		}
		return true
	})

	// Shard 0's leader among the live nodes, and a voter of it to remove.
	var at int
	testwait.For(t, 20*time.Second, "a leader of shard 0 on a live node", func() bool {
		for _, i := range c.Leaders(0) {
			if i != ctl {
				at = i
				return true
			}
		}
		return false
	})
	victim := live[0]
	if victim == at {
		victim = live[1]
	}
	r := c.Node(at).Host().Replica(0)
	before, err := r.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	p := api.NewPeers()
	defer p.Close()
	req := topology.AdminRequest{Shard: 0, Action: topology.AdminRemoveServer, Node: topology.NodeID(c.ID(victim)),
		Fence: topology.Fence{ControlTerm: oldTerm, Epoch: old.Epoch}}
	if _, err := p.ShardAdmin(gridtest.Context(t), c.Addrs()[at], req); !errors.Is(err, topology.ErrStaleFence) {
		t.Fatalf("removal of %s under the deposed control term %d: %v, want ErrStaleFence", c.ID(victim), oldTerm, err)
	}
	// Every live replica's view: leadership may have moved meanwhile (the
	// control leader hands shards to their preferred leaders), which is
	// not what is tested here.
	var after []raft.Server
	for _, i := range live {
		after, err = c.Node(i).Host().Replica(0).Configuration()
		if err != nil || !slices.Equal(after, before) {
			t.Fatalf("shard 0's group on %s after the refused removal: %v %v, want %v", c.ID(i), after, err, before)
		}
	}
	if !slices.ContainsFunc(after, func(s raft.Server) bool { return string(s.ID) == c.ID(victim) && s.Suffrage == raft.Voter }) {
		t.Fatalf("%s is not a voter of shard 0: %v", c.ID(victim), after)
	}

	// The current term passes the fence (the transfer may still be refused
	// by Raft, or find leadership moved: not for its term).
	cur := c.Node(at).Cluster().ControlTerm()
	tr := topology.AdminRequest{Shard: 0, Action: topology.AdminTransferLeadership, Node: topology.NodeID(c.ID(victim)),
		RaftAddr: c.Node(victim).RaftAddr(), Fence: topology.Fence{ControlTerm: cur, Epoch: c.Map().Epoch}}
	if _, err := p.ShardAdmin(gridtest.Context(t), c.Addrs()[at], tr); errors.Is(err, topology.ErrStaleFence) {
		t.Fatalf("transfer under the current control term %d: %v", cur, err)
	}
}
