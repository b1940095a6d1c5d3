package gossip_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/l4xg/grid/cluster/gossip"
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

// TestClusterNodeSurvivesHostileGossip (defect 10, on a real node): frames
// of a few bytes sent to a node's gossip port are refused; the node goes on
// serving and a new node joins through it.
func TestClusterNodeSurvivesHostileGossip(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Shards: 4})
	target := c.Node(0).Cluster()
	addr := target.GossipAddr()
	streams := gossip.HostileStreams(t)
	for name, msg := range streams {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		conn.Write(msg)
		conn.SetReadDeadline(time.Now().Add(time.Second))
		io.Copy(io.Discard, conn) // until the node closes it
		conn.Close()
	}
	peer := c.Node(1).Cluster()
	udp, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	if _, err := udp.Write(gossip.HostileAlivePacket(t, peer.Self(), peer.GossipAddr())); err != nil {
		t.Fatal(err)
	}
	want := uint64(len(streams) + 1)
	testwait.For(t, 10*time.Second, "every frame refused", func() bool { return target.RefusedGossipFrames() == want })
	c.WaitStable(30 * time.Second)
	i := c.Add()
	testwait.For(t, 30*time.Second, "every node sees four alive", func() bool {
		for j := 0; j <= i; j++ {
			if !sees(c, j, 0, 1, 2, i) {
				return false
			}
		}
		return true
	})
}
