package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/shard"
)

// TestFullDiskNodeLeadsNoShard: a node whose disk is below its reserve
// (node-1's reserve is larger than any disk) gossips so, hands away the
// leadership of its shards, and the control leader does not hand the
// shard it prefers node-1 for back to it; every shard takes new keys on
// the nodes with room.
func TestFullDiskNodeLeadsNoShard(t *testing.T) {
	const full = "node-1"
	transfers := &transferLog{}
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Shards: 3, WrapRemote: transfers.wrap, TuneHost: func(hc *shard.HostConfig) {
		if hc.NodeID == full {
			hc.DiskReserve = 1 << 62
		}
	}})
	testwait.For(t, 10*time.Second, "every node to hear that "+full+"'s disk is full", func() bool {
		for i := range 3 {
			members := c.Node(i).Cluster().Members()
			at := slices.IndexFunc(members, func(m gossip.Member) bool { return string(m.ID) == full })
			if at < 0 || !members[at].DiskFull {
				return false
			}
		}
		return true
	})
	ledByOthers := func() bool {
		for s := range 3 {
			if l := c.Leaders(s); len(l) != 1 || l[0] == c.Index(full) {
				return false
			}
		}
		return true
	}
	testwait.For(t, 20*time.Second, "every shard to be led by a node with room", ledByOthers)

	preferred := slices.IndexFunc(c.Map().ShardReplicas, func(set []topology.NodeID) bool { return string(set[0]) == full })
	if preferred < 0 {
		t.Fatalf("the plan prefers %s for no shard: %v", full, c.Map().ShardReplicas)
	}
	ctl := c.WaitControlLeader(10*time.Second, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := transfers.to(full)
	c.Node(ctl).Cluster().RestoreLeadersForTest(ctx)
	if n := transfers.to(full); n != before {
		t.Fatalf("the control leader asked %d times to hand a leadership (shard %d is preferred there) to %s, whose disk is full", n-before, preferred, full)
	}

	// Its Status says so; another node's does not.
	for i, want := range map[int]bool{c.Index(full): true, (c.Index(full) + 1) % 3: false} {
		one, err := client.Dial(ctx, c.Addrs()[i])
		if err != nil {
			t.Fatal(err)
		}
		st, err := one.Status(ctx)
		one.Close()
		if err != nil || st.DiskFull != want {
			t.Fatalf("status of %s: disk full %v, %v; want %v", c.ID(i), st.DiskFull, err, want)
		}
	}

	// An election (a busy machine can miss a heartbeat) may still make
	// the full node a leader, until it hands over: a reserve it refuses
	// was not applied, and is sent again until one with room takes it.
	cl := dialAll(t, c)
	for i := 0; i < 3*20; i++ {
		key := fmt.Sprintf("k%d", i)
		var r client.Result
		var err error
		testwait.For(t, 20*time.Second, "a leader with room to take "+key, func() bool {
			r, err = cl.Reserve(ctx, "t", key)
			return !errors.Is(err, client.ErrLimitExceeded)
		})
		if err != nil || r.Outcome != client.OutcomeAcquired {
			t.Fatalf("reserve %s (shard %d): %v %v", key, c.ShardOf("t", key), r.Outcome, err)
		}
	}
}

// transferLog counts the leadership transfers the control leaders ask
// for, by target node.
type transferLog struct {
	mu    sync.Mutex
	calls map[string]int
}

func (l *transferLog) wrap(_ int, r cluster.Remote) cluster.Remote { return loggedTransfers{r, l} }

func (l *transferLog) to(node string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[node]
}

type loggedTransfers struct {
	cluster.Remote
	log *transferLog
}

func (r loggedTransfers) ShardAdmin(ctx context.Context, addr string, req topology.AdminRequest) (uint64, error) {
	if req.Action == topology.AdminTransferLeadership {
		r.log.mu.Lock()
		if r.log.calls == nil {
			r.log.calls = map[string]int{}
		}
		r.log.calls[string(req.Node)]++
		r.log.mu.Unlock()
	}
	return r.Remote.ShardAdmin(ctx, addr, req)
}
