package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// completeKeys reserves and completes n fresh keys through cl and returns
// each key's token.
func completeKeys(t *testing.T, cl *client.Client, n int) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tokens := map[string]uint64{}
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		r, err := cl.Reserve(ctx, "t", key)
		if err != nil || r.Outcome != client.OutcomeAcquired {
			t.Fatalf("reserve %s: %v %v", key, r.Outcome, err)
		}
		if _, err := cl.Complete(ctx, "t", key, r.Token); err != nil {
			t.Fatal(err)
		}
		tokens[key] = r.Token
	}
	return tokens
}

// checkDuplicates checks that every completed key answers DUPLICATE with
// the token it was completed under. The keys are asked all at once, in
// shared batches, so that the check's minute bounds the slowest answer,
// not the sum of them all. It asks through a client of its own whose
// retry budget is that minute: an answer that the grid is unavailable
// says nothing of whether the key is durable, so the key is asked again
// until it answers or the minute is up.
func checkDuplicates(t *testing.T, c *gridtest.Cluster, tokens map[string]uint64) {
	t.Helper()
	const timeout = time.Minute
	retry := client.DefaultRetryPolicy()
	retry.Budget = timeout
	cl, err := client.Dial(context.Background(), strings.Join(c.Addrs(), ","), client.WithRetryPolicy(retry))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var mu sync.Mutex
	var bad []string
	var wg sync.WaitGroup
	for key, tok := range tokens {
		wg.Go(func() {
			r, err := cl.Reserve(ctx, "t", key)
			if err != nil || r.Outcome != client.OutcomeDuplicate || r.Token != tok {
				mu.Lock()
				defer mu.Unlock()
				bad = append(bad, fmt.Sprintf("%s: %v token %d (%v), want DUPLICATE token %d", key, r.Outcome, r.Token, err, tok))
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		slices.Sort(bad)
		t.Fatalf("%d of %d completed keys: %s", len(bad), len(tokens), strings.Join(bad, "; "))
	}
}

// groupLists reports whether shard s's leader lists id in its group's
// configuration.
func groupLists(t *testing.T, c *gridtest.Cluster, s int, id topology.NodeID) bool {
	t.Helper()
	var listed bool
	testwait.Until(t, 10*time.Second, func() string {
		for _, i := range c.Leaders(s) {
			servers, err := c.Node(i).Host().Replica(s).Configuration()
			if err != nil {
				return err.Error()
			}
			listed = slices.ContainsFunc(servers, func(srv raft.Server) bool { return string(srv.ID) == string(id) })
			return ""
		}
		return fmt.Sprintf("shard %d has no leader", s)
	})
	return listed
}

func others(c *gridtest.Cluster, n, except int) []int {
	var out []int
	for i := range n {
		if i != except {
			out = append(out, i)
		}
	}
	return out
}

// Defect 1 (a): a node restarting from an old control snapshot replays a
// map in which it alone holds a shard that has moved away since (and whose
// replica it deleted). It must not bootstrap a second, one-voter group for
// that shard: such a group would lead and grant keys the real group holds
// COMPLETED. The node is cut off from the control group's Raft while it
// starts, so its map stays the historical one for as long as the test
// looks.
func TestRestartReplayDoesNotBootstrapAgain(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 2, Replicas: 1, Shards: 8})
	cl := dialAll(t, c)
	tokens := completeKeys(t, cl, 40)
	old := make([]*topology.Map, 2)
	for i := range 2 {
		// Raft refuses to snapshot before the FSM has applied an entry
		// after the latest configuration change: commit one (a join that
		// repeats what the map knows changes nothing).
		ctl := c.Node(c.WaitControlLeader(10*time.Second, -1)).Cluster()
		self := ctl.Map().Nodes[ctl.Self()]
		if _, err := ctl.ProposeForTest(context.Background(), topology.Command{Type: topology.CmdNodeJoin, Node: self}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, func() string {
			if err := c.Node(i).Cluster().SnapshotControl(); err != nil {
				return err.Error()
			}
			return ""
		})
		old[i] = c.Node(i).Cluster().Map()
	}
	third := c.Add()
	c.WaitStable(60 * time.Second)
	testwait.Until(t, 60*time.Second, func() string {
		if n := replicasOn(c.Map(), c.ID(third)); n < 2 {
			return fmt.Sprintf("%s holds %d replicas, want 2 or more", c.ID(third), n)
		}
		return ""
	})
	c.WaitStable(60 * time.Second)

	// x alone held shard s at its snapshot and has given it away; it still
	// holds shard u > s (the old code synced shards in order: by the time
	// u runs, s would have been bootstrapped).
	now := c.Map()
	x, s, u := -1, -1, -1
	for i := range 2 {
		id := topology.NodeID(c.ID(i))
		for sh := range now.Shards {
			if s < 0 && slices.Equal(old[i].ShardReplicas[sh], []topology.NodeID{id}) && !slices.Contains(now.ShardReplicas[sh], id) {
				s = sh
			}
			if s >= 0 && sh > s && slices.Contains(now.ShardReplicas[sh], id) {
				u = sh
				break
			}
		}
		if s >= 0 && u >= 0 {
			x = i
			break
		}
		s, u = -1, -1
	}
	if x < 0 {
		t.Fatalf("no node gave away a shard it held alone at its snapshot and holds a later one: snapshots %v %v, now %v",
			old[0].ShardReplicas, old[1].ShardReplicas, now.ShardReplicas)
	}

	// Once the group's committed configuration dropped it, x deleted its
	// replica of s.
	testwait.Until(t, 30*time.Second, func() string {
		if c.Node(x).Host().Replica(s) != nil {
			return fmt.Sprintf("%s still runs its replica of shard %d, which moved to %v", c.ID(x), s, now.ShardReplicas[s])
		}
		return ""
	})
	c.Stop(x)
	c.Partition(others(c, 3, x)) // x alone: no control leader reaches it
	if err := c.Launch(x); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, func() string {
		if n := c.Node(x); n == nil || n.Host().Replica(u) == nil {
			return fmt.Sprintf("%s does not run its replica of shard %d", c.ID(x), u)
		}
		return ""
	})
	if r := c.Node(x).Host().Replica(s); r != nil {
		servers, _ := r.Configuration()
		t.Errorf("%s replayed epoch %d and started shard %d again (configuration %v, last index %d): a second group of a shard that lives on %v",
			c.ID(x), old[x].Epoch, s, servers, r.Status().LastIndex, now.ShardReplicas[s])
	}
	if c.Node(x).Cluster().Ready() {
		t.Errorf("%s is ready while its map (epoch %d) is not current", c.ID(x), c.Node(x).Cluster().Map().Epoch)
	}
	c.Heal()
	c.WaitStable(60 * time.Second)
	checkDuplicates(t, c, tokens)
	if got := c.Leaders(s); len(got) != 1 || !slices.Contains(c.Replicas(s), got[0]) {
		t.Fatalf("shard %d led by %v, replicas %v", s, got, c.Replicas(s))
	}
}

// Defect 1 (b): a map that leaves a node out of a shard while the shard's
// group still has it as a voter (what a restarting node replays from its
// history) must not make the node stop and delete its replica: its Raft
// log, term and vote are what the group counts on. The node purges only
// once the group's committed configuration has dropped it.
func TestStaleMapDoesNotPurgeLiveReplica(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Replicas: 2, Shards: 4})
	cl := dialAll(t, c)
	tokens := completeKeys(t, cl, 40)
	m := c.Map()
	const s = 0
	set := m.ShardReplicas[s]
	victim := c.Index(string(set[1]))
	var spare topology.NodeID
	for id := range m.Nodes {
		if !slices.Contains(set, id) {
			spare = id
		}
	}
	live := c.Node(victim).Host().Replica(s)
	before := live.Status()

	// The map moves the victim's replica to spare; the group is not told.
	ctl := c.Node(c.WaitControlLeader(10*time.Second, -1)).Cluster()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	epoch, err := ctl.ProposeForTest(ctx, topology.Command{Type: topology.CmdApplyMove,
		Move: topology.Move{Shard: s, Add: spare, Remove: set[1]}})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the victim has acted on that map, and finished a round
	// after it.
	var rounds uint64
	purgedMember := false
	testwait.Until(t, 10*time.Second, func() string {
		n := c.Node(victim).Cluster()
		switch {
		case c.Node(victim).Host().Replica(s) != live:
			// Gone: fine only if the group dropped it first (a repair of
			// the group may have done so since).
			purgedMember = groupLists(t, c, s, set[1])
			return ""
		case n.Map().Epoch < epoch:
			return fmt.Sprintf("%s has the map at epoch %d, want %d", c.ID(victim), n.Map().Epoch, epoch)
		case n.ActedEpoch() < epoch:
			return fmt.Sprintf("%s acted on epoch %d, want %d", c.ID(victim), n.ActedEpoch(), epoch)
		case rounds == 0:
			rounds = n.ReplicaRounds()
		}
		if n.ReplicaRounds() < rounds+2 {
			return "a round after acting"
		}
		return ""
	})
	if purgedMember {
		t.Fatalf("%s stopped its replica of shard %d (term %d, last index %d) on a map that left it out while its group still counts on it",
			c.ID(victim), s, before.Term, before.LastIndex)
	}
	if c.Node(victim).Host().Replica(s) != live {
		t.Logf("the replica was removed from its group, then purged")
	} else if st := live.Status(); st.Term < before.Term || st.LastIndex < before.LastIndex {
		t.Fatalf("replica state went back: term %d→%d, last index %d→%d", before.Term, st.Term, before.LastIndex, st.LastIndex)
	}
	checkDuplicates(t, c, tokens)
}

// Defect 1 end to end: a cluster grown from 3 to 4 nodes (replicas move
// onto the new node and off the others) is restarted node by node. Each
// restarting node replays the control log from its start; it must act on
// none of that history: after each restart every shard's group has exactly
// the map's replicas as voters and one leader, and every completed key
// still answers DUPLICATE with its token.
func TestGrowThenRollingRestart(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Replicas: 3, Shards: 8})
	cl := dialAll(t, c)
	tokens := completeKeys(t, cl, 60)
	i := c.Add()
	testwait.Until(t, 90*time.Second, func() string {
		if n := replicasOn(c.Map(), c.ID(i)); n != 6 {
			return fmt.Sprintf("%s holds %d replicas, want 6", c.ID(i), n)
		}
		return ""
	})
	c.WaitStable(60 * time.Second)
	for k := range 4 {
		c.Restart(k)
		c.WaitStable(60 * time.Second)
		for s := range 8 {
			oneLeader(t, c, s, "after restarting "+c.ID(k))
		}
		checkDuplicates(t, c, tokens)
	}
}

// oneLeader checks that shard s has at most one leader per term, and waits
// until it has at most one at all: a leader deposed by an election (a
// leadership transfer, say) still believes it leads until it hears of the
// new term or its leader lease runs out, which Raft allows, but two
// leaders in one term never.
func oneLeader(t *testing.T, c *gridtest.Cluster, s int, when string) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() string {
		ls := c.Leaders(s)
		terms := map[uint64]int{}
		for _, i := range ls {
			r := c.Node(i).Host().Replica(s)
			if r == nil {
				return fmt.Sprintf("%s: %s's replica of shard %d went away", when, c.ID(i), s)
			}
			term := r.Status().Term
			if j, ok := terms[term]; ok {
				t.Fatalf("%s: shard %d has two leaders in term %d: %s and %s", when, s, term, c.ID(j), c.ID(i))
			}
			terms[term] = i
		}
		if len(ls) > 1 {
			return fmt.Sprintf("%s: shard %d led by %v in terms %v", when, s, ls, terms)
		}
		return ""
	})
}
