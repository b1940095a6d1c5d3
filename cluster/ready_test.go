package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// Defect 5: a node whose replica is a non-voter of its group (still
// copying the log, counted in no quorum) is not ready, although the
// replica runs and knows its leader; it becomes ready once a voter caught
// up with its leader. The test takes one replica out of its group and adds
// it back as a non-voter by hand; the map is left alone.
func TestNotReadyWhileNonvoter(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Replicas: 3, Shards: 2})
	const s = 0
	lead := c.Leaders(s)
	if len(lead) != 1 {
		t.Fatalf("shard %d leaders %v", s, lead)
	}
	f := (lead[0] + 1) % 3
	id, addr := c.ID(f), c.Node(f).RaftAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.Node(lead[0]).Host().Replica(s)
	if err := leader.RemoveServer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := leader.AddNonvoter(ctx, id, addr); err != nil {
		t.Fatal(err)
	}
	// The replica runs and knows its leader, as a non-voter: the node is
	// not ready. (Polled closely: a repair of the group may promote it
	// soon.)
	nonvoter := func() (bool, string) {
		r := c.Node(f).Host().Replica(s)
		servers, err := r.Configuration()
		if err != nil {
			return false, err.Error()
		}
		if l, _ := r.Leader(); l != c.ID(lead[0]) {
			return false, fmt.Sprintf("%s knows leader %q", id, l)
		}
		for _, srv := range servers {
			if string(srv.ID) == id && srv.Suffrage == raft.Nonvoter {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s not a non-voter: %v", id, servers)
	}
	deadline := time.Now().Add(20 * time.Second)
	for seen := false; !seen; {
		if time.Now().After(deadline) {
			t.Fatalf("never saw %s as a non-voter of shard %d knowing its leader", id, s)
		}
		ok, _ := nonvoter()
		if !ok {
			time.Sleep(time.Millisecond)
			continue
		}
		why := c.Node(f).Cluster().ReadinessNow(ctx)
		if still, _ := nonvoter(); !still {
			continue // promoted meanwhile: look again
		}
		if why == "" {
			t.Fatalf("%s is ready while a non-voter of shard %d", id, s)
		}
		t.Logf("not ready as a non-voter: %s", why)
		seen = true
	}
	if err := leader.AddVoter(ctx, id, addr); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, func() string {
		if ok, why := c.Node(f).Cluster().Readiness(); !ok {
			return fmt.Sprintf("%s not ready as a voter: %s", id, why)
		}
		return ""
	})
}
