package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// A drained node keeps running removed: it says so and is not ready.
// Started again on the same data directory it stays removed; started
// with a wiped one (a new incarnation) under the same id, it is admitted
// again and receives replicas.
func TestRemovedNodeComesBackWiped(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 4, Replicas: 3, Shards: 4})
	cl := dialAll(t, c)
	tokens := completeKeys(t, cl, 20)
	const x = 3
	id := topology.NodeID(c.ID(x))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Node(c.WaitControlLeader(10*time.Second, -1)).Cluster().Drain(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 60*time.Second, func() string {
		if st := c.Map().Nodes[id].State; st != topology.NodeRemoved {
			return fmt.Sprintf("%s is %v", id, st)
		}
		return ""
	})
	testwait.Until(t, 10*time.Second, func() string {
		n := c.Node(x).Cluster()
		if n.State() != topology.NodeRemoved || n.Ready() {
			return fmt.Sprintf("removed node: state %v, ready %v", n.State(), n.Ready())
		}
		return ""
	})
	// Its Status says so too.
	conn, err := grpc.NewClient(c.Addrs()[x], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := gridpb.NewGridClient(conn).Status(ctx, &gridpb.StatusRequest{})
	conn.Close()
	if err != nil || st.GetNodeState() != "removed" || st.GetReady() {
		t.Fatalf("status of the removed node: state %q ready %v (%v)", st.GetNodeState(), st.GetReady(), err)
	}
	inc := c.Node(x).Cluster().Incarnation()

	// Same data directory: the control leader sees it alive again and
	// leaves it removed, round after round.
	c.Stop(x)
	if err := c.Launch(x); err != nil {
		t.Fatal(err)
	}
	leader := c.Node(c.WaitControlLeader(10*time.Second, -1)).Cluster()
	testwait.Until(t, 30*time.Second, func() string {
		if !leader.Alive()[id] {
			return fmt.Sprintf("%s not alive in the control leader's gossip view", id)
		}
		return ""
	})
	rounds := leader.AdmitRounds()
	testwait.Until(t, 30*time.Second, func() string {
		if leader.AdmitRounds() < rounds+2 {
			return "two admission rounds"
		}
		return ""
	})
	if st := leader.Map().Nodes[id]; st.State != topology.NodeRemoved || st.Incarnation != inc {
		t.Fatalf("%s restarted on its data directory: %+v, want removed under incarnation %x", id, st, inc)
	}

	// Wiped: admitted again, empty, and given its share.
	c.Stop(x)
	if err := c.Wipe(x); err != nil {
		t.Fatal(err)
	}
	if err := c.StartNodes(x); err != nil {
		t.Fatal(err)
	}
	if got := c.Node(x).Cluster().Incarnation(); got == inc {
		t.Fatalf("wiped data directory kept incarnation %x", inc)
	}
	testwait.Until(t, 60*time.Second, func() string {
		m := c.Map()
		if st := m.Nodes[id].State; st != topology.NodeActive {
			return fmt.Sprintf("%s is %v", id, st)
		}
		if n := replicasOn(m, string(id)); n != 3 {
			return fmt.Sprintf("%s holds %d replicas, want 3", id, n)
		}
		return ""
	})
	c.WaitStable(60 * time.Second)
	checkDuplicates(t, c, tokens)
}
