package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/gridtest"
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
	leader := c.Node(lead[0]).Host().Shard(s)
	if err := leader.RemoveServer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := leader.AddNonvoter(ctx, id, addr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() string {
		r := c.Node(f).Host().Shard(s)
		servers, err := r.Configuration()
		if err != nil {
			return err.Error()
		}
		if l, _ := r.Leader(); l != c.ID(lead[0]) {
			return fmt.Sprintf("%s knows leader %q", id, l)
		}
		for _, srv := range servers {
			if string(srv.ID) == id && srv.Suffrage == raft.Nonvoter {
				return ""
			}
		}
		return fmt.Sprintf("%s not a non-voter yet: %v", id, servers)
	})
	waitFor(t, 10*time.Second, func() string {
		if c.Node(f).Cluster().Ready() {
			return fmt.Sprintf("%s is ready while a non-voter of shard %d", id, s)
		}
		return ""
	})
	if ok, why := c.Node(f).Cluster().Readiness(); ok || why == "" {
		t.Fatalf("readiness %v %q, want a reason", ok, why)
	}
	if err := leader.AddVoter(ctx, id, addr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() string {
		if ok, why := c.Node(f).Cluster().Readiness(); !ok {
			return fmt.Sprintf("%s not ready as a voter: %s", id, why)
		}
		return ""
	})
}
