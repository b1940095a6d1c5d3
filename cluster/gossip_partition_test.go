package cluster_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// sees reports whether node i's gossip view has exactly the given nodes
// alive.
func sees(c *gridtest.Cluster, i int, alive ...int) bool {
	view := c.Node(i).Cluster().Alive()
	if len(view) != len(alive) {
		return false
	}
	for _, j := range alive {
		if !view[topology.NodeID(c.ID(j))] {
			return false
		}
	}
	return true
}

// TestClusterGossipPartitionHeals (defect 8, gridtest): Partition cuts
// gossip as well as Raft, so each side sees the other dead; within the
// grace period nothing moves, and after Heal every node sees every other
// alive again and the cluster is stable.
func TestClusterGossipPartitionHeals(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Shards: 4})
	before := replicaSets(c.Map())
	c.Partition([]int{1, 2})
	testwait.For(t, 20*time.Second, "node 1 alone, nodes 2 and 3 together", func() bool {
		return sees(c, 0, 0) && sees(c, 1, 1, 2) && sees(c, 2, 1, 2)
	})
	// Hold the partition until the broadcasts of the deaths have gone out
	// (memberlist sends each a few times, to the dead too): a heal within
	// that window heals through them, a longer partition only by rejoining.
	var marks [3]uint64
	for i := range marks {
		marks[i] = c.Node(i).Cluster().GossipDrains()
	}
	testwait.For(t, 20*time.Second, "100 more broadcast drains on every node", func() bool {
		for i := range marks {
			if c.Node(i).Cluster().GossipDrains() < marks[i]+100 {
				return false
			}
		}
		return true
	})
	c.Heal()
	testwait.For(t, 20*time.Second, "every node sees every node alive", func() bool {
		return sees(c, 0, 0, 1, 2) && sees(c, 1, 0, 1, 2) && sees(c, 2, 0, 1, 2)
	})
	c.WaitStable(60 * time.Second)
	if after := replicaSets(c.Map()); !slices.Equal(after, before) {
		t.Errorf("replicas moved within the grace period: %v, then %v", before, after)
	}
}

// replicaSets lists each shard's replica set, sorted.
func replicaSets(m *topology.Map) []string {
	var out []string
	for _, set := range m.ShardReplicas {
		ids := make([]string, len(set))
		for i, id := range set {
			ids[i] = string(id)
		}
		slices.Sort(ids)
		out = append(out, strings.Join(ids, ","))
	}
	return out
}

// TestClusterRaftPartitionKeepsGossip: PartitionRaft leaves gossip up.
func TestClusterRaftPartitionKeepsGossip(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Shards: 4})
	c.PartitionRaft([]int{1, 2})
	defer c.Heal()
	// The Raft cut is seen through its effect: every shard is led from
	// the majority side. Gossip must not notice.
	testwait.For(t, 30*time.Second, "every shard led by node 2 or 3 alone", func() bool {
		for s := range 4 {
			if l := c.Leaders(s); len(l) != 1 || l[0] == 0 {
				return false
			}
		}
		return true
	})
	for i := range 3 {
		if !sees(c, i, 0, 1, 2) {
			t.Fatalf("node %d sees %v alive during a Raft-only partition", i+1, c.Node(i).Cluster().Alive())
		}
	}
}
