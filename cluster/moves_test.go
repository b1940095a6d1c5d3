package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// adminLog is a cluster.Remote decorator around a node's real one (the
// api.Peers pool) that records every shard admin request the node sends,
// and whether the node led the control group when it sent it.
type adminLog struct {
	mu    sync.Mutex
	c     *gridtest.Cluster // set once started
	calls []adminCall
}

type adminCall struct {
	from    int
	req     topology.AdminRequest
	leading bool
}

type loggedRemote struct {
	cluster.Remote
	log  *adminLog
	from int
}

func (l *adminLog) wrap(i int, r cluster.Remote) cluster.Remote {
	return &loggedRemote{Remote: r, log: l, from: i}
}

func (r *loggedRemote) ShardAdmin(ctx context.Context, addr string, req topology.AdminRequest) (uint64, error) {
	r.log.mu.Lock()
	c := r.log.c
	r.log.mu.Unlock()
	leading := false
	if c != nil {
		if n := c.Node(r.from); n != nil {
			leading = n.Cluster().ControlState() == "leader"
		}
	}
	r.log.mu.Lock()
	r.log.calls = append(r.log.calls, adminCall{from: r.from, req: req, leading: leading})
	r.log.mu.Unlock()
	return r.Remote.ShardAdmin(ctx, addr, req)
}

// count returns how many requests node from sent, and how many of those
// were strays: sent while it did not lead the control group, and not the
// one request that was on its way when the leadership went.
//
// A node's round checks that it leads right before each request
// (shardAdmin), and the log reads the node's state again when the request
// reaches it; a deposition between the two (a few instructions, but a
// preemption on a loaded machine can stretch them) logs the request as
// sent by a follower although it was checked under the leadership. The
// round sends its requests one at a time, so there is at most one such
// request per loss of the leadership, and it comes straight after a
// request sent while leading: that is the one request a deposed leader
// cannot help (its fence term lets a node that knows a later term refuse
// it). Any other request sent while not leading is a round that went on.
func (l *adminLog) count(from int) (all, strays int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prevLeading := false
	for _, c := range l.calls {
		if c.from != from {
			continue
		}
		all++
		if !c.leading && !prevLeading {
			strays++
		}
		prevLeading = c.leading
	}
	return all, strays
}

// Defect 3: a control leader cut off in the middle of a round stops it
// when it loses the leadership. Once deposed it sends no shard admin
// request but the one already past its check (adminLog.count), and after the heal every shard's group has exactly the map's
// replicas as voters, R of them: no shard lost two replicas to two
// leaders.
func TestDeposedControlLeaderStopsItsRound(t *testing.T) {
	log := &adminLog{}
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Shards: 4, WrapRemote: log.wrap})
	log.mu.Lock()
	log.c = c
	log.mu.Unlock()
	c.WaitControlLeader(30*time.Second, -1)
	before := make([]int, 3)
	for i := range before {
		before[i], _ = log.count(i)
	}

	// A fourth node joins: the leader moves three replicas onto it. The
	// node cut off below is the one that sends the join's first shard
	// admin request: the control leader then, whichever node leads by
	// that time (on a loaded machine the leadership may move before).
	x := c.Add()
	old := -1
	testwait.Until(t, 30*time.Second, func() string {
		for i := range before {
			if all, _ := log.count(i); all > before[i] {
				old = i
				return ""
			}
		}
		return "no control leader has sent a shard admin request for the join yet"
	})
	if st := c.Node(old).Cluster().ControlState(); st != "leader" {
		t.Skipf("the node that started the join (%s) no longer leads the control group (%s): the round to cut off is over", c.ID(old), st)
	}
	var others []int
	for i := range 4 {
		if i != old {
			others = append(others, i)
		}
	}
	// Raft alone: with gossip cut too, the old leader's node would be dead
	// past the grace period before the join is done, and the plan would
	// then rightly give node x all four shards.
	c.PartitionRaft(others)
	testwait.Until(t, 10*time.Second, func() string {
		if st := c.Node(old).Cluster().ControlState(); st == "leader" {
			return "the cut-off control leader still leads"
		}
		return ""
	})
	c.WaitControlLeader(30*time.Second, old)
	// The new leader carries the join on; the old one's round, had it
	// gone on, would be sending requests all along.
	testwait.Until(t, 90*time.Second, func() string {
		if n := replicasOn(c.Map(), c.ID(x)); n != 3 {
			return fmt.Sprintf("%s holds %d replicas, want 3", c.ID(x), n)
		}
		return ""
	})
	all, strays := log.count(old)
	t.Logf("the old control leader sent %d shard admin requests for the join", all-before[old])
	if strays > 0 {
		t.Errorf("the old control leader sent %d shard admin requests after it was deposed", strays)
	}
	c.Heal()
	c.WaitStable(90 * time.Second)
	if _, after := log.count(old); after > strays {
		t.Errorf("the old control leader sent %d more shard admin requests while not leading, after the heal", after-strays)
	}
}

// Defect 2: an add interrupted after its map commit (the new node cut off
// from Raft, then the control leader killed) is repaired: after the next
// rounds every shard's committed voters are exactly its map replicas, R
// of them. Before, the next leader's shrink removed a real replica and the
// group stayed at 2 voters while the map listed 3.
func TestInterruptedAddIsRepaired(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Shards: 4})
	x := c.AddCutOff()
	testwait.Until(t, 30*time.Second, func() string {
		if replicasOn(c.Map(), c.ID(x)) == 0 {
			return c.ID(x) + " is given no replica yet"
		}
		return ""
	})
	leader := c.WaitControlLeader(30*time.Second, -1)
	c.Kill(leader)
	epoch := c.Map().Epoch
	c.WaitControlLeader(30*time.Second, leader)
	testwait.Until(t, 30*time.Second, func() string {
		if m := c.Map(); m.Epoch == epoch {
			return fmt.Sprintf("the new control leader changed nothing (epoch %d)", m.Epoch)
		}
		return ""
	})
	c.Heal()
	if err := c.StartNodes(leader); err != nil {
		t.Fatal(err)
	}
	c.WaitStable(2 * time.Minute)
}

// The control group grows to 5 voters once the cluster has 5 active nodes
// (docs/design.md section 5): the two nodes that join a 3-node cluster are
// promoted by the control leader's plan.
func TestControlGroupFiveVoters(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Shards: 2})
	c.Add()
	c.Add()
	testwait.Until(t, 60*time.Second, func() string {
		voters := 0
		var states []string
		for i := range 5 {
			st := "down"
			if n := c.Node(i); n != nil {
				st = n.Cluster().ControlState()
			}
			if st == "leader" || st == "follower" {
				voters++
			}
			states = append(states, st)
		}
		if voters != 5 {
			return fmt.Sprintf("%d control voters, want 5: %v", voters, states)
		}
		return ""
	})
}
