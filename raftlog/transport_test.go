package raftlog

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// muxNode is one node of an in-process cluster: a Mux with its Faults and
// one replica of every group, all on the Mux's single listener.
type muxNode struct {
	mux      *Mux
	faults   *Faults
	replicas map[uint64]*replica
}

type replica struct {
	r     *raft.Raft
	fsm   *listFSM
	trans *raft.NetworkTransport
}

type muxCluster struct {
	t      *testing.T
	nodes  []*muxNode
	groups []uint64
}

// startMuxCluster starts n nodes hosting every group in groups, with
// in-memory log and snapshot stores and real TCP between the nodes, and
// waits until every group has a leader.
func startMuxCluster(t *testing.T, n int, groups []uint64) *muxCluster {
	t.Helper()
	c := &muxCluster{t: t, groups: groups}
	for range n {
		f := &Faults{}
		m, err := ListenMux("127.0.0.1:0", MuxConfig{Faults: f})
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, &muxNode{mux: m, faults: f, replicas: make(map[uint64]*replica)})
	}
	t.Cleanup(c.stop)
	var servers []raft.Server
	for i, nd := range c.nodes {
		servers = append(servers, raft.Server{ID: nodeID(i), Address: raft.ServerAddress(nd.mux.Addr().String())})
	}
	for i, nd := range c.nodes {
		for _, g := range groups {
			nd.replicas[g] = c.startReplica(i, g, servers)
		}
	}
	for _, g := range groups {
		c.waitLeader(g, -1)
	}
	return c
}

func nodeID(i int) raft.ServerID { return raft.ServerID(fmt.Sprintf("n%d", i)) }

func (c *muxCluster) startReplica(i int, g uint64, servers []raft.Server) *replica {
	t := c.t
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = nodeID(i)
	conf.HeartbeatTimeout = 100 * time.Millisecond
	conf.ElectionTimeout = 100 * time.Millisecond
	conf.LeaderLeaseTimeout = 100 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.Logger = hclog.NewNullLogger()
	trans, err := NewTransport(c.nodes[i].mux, g, TransportConfig{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(trans.LocalAddr()), c.nodes[i].mux.Addr().String(); got != want {
		t.Fatalf("transport LocalAddr %s, want the mux address %s", got, want)
	}
	logs, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	if err := raft.BootstrapCluster(conf, logs, logs, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
		t.Fatalf("node %d group %d: bootstrap: %v", i, g, err)
	}
	rep := &replica{fsm: &listFSM{}, trans: trans}
	if rep.r, err = raft.NewRaft(conf, rep.fsm, logs, logs, snaps, trans); err != nil {
		t.Fatalf("node %d group %d: NewRaft: %v", i, g, err)
	}
	return rep
}

// stop shuts down every replica, then every transport and Mux.
func (c *muxCluster) stop() {
	for _, nd := range c.nodes {
		for g, rep := range nd.replicas {
			if err := rep.r.Shutdown().Error(); err != nil {
				c.t.Errorf("group %d: shutdown: %v", g, err)
			}
		}
	}
	for _, nd := range c.nodes {
		for _, rep := range nd.replicas {
			_ = rep.trans.Close()
		}
		if err := nd.mux.Close(); err != nil {
			c.t.Errorf("mux close: %v", err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLeader waits until a node other than except leads group g and
// returns its index.
func (c *muxCluster) waitLeader(g uint64, except int) int {
	c.t.Helper()
	leader := -1
	waitFor(c.t, fmt.Sprintf("group %d: leader on a node other than %d", g, except), func() bool {
		for i, nd := range c.nodes {
			if i != except && nd.replicas[g].r.State() == raft.Leader {
				leader = i
				return true
			}
		}
		return false
	})
	return leader
}

// apply applies cmds to group g through the leader on node i, pipelined.
func (c *muxCluster) apply(i int, g uint64, cmds []string) {
	c.t.Helper()
	futures := make([]raft.ApplyFuture, len(cmds))
	for k, cmd := range cmds {
		futures[k] = c.nodes[i].replicas[g].r.Apply([]byte(cmd), 5*time.Second)
	}
	for k, f := range futures {
		if err := f.Error(); err != nil {
			c.t.Fatalf("group %d on node %d: apply %d: %v", g, i, k, err)
		}
	}
}

// applyAll applies n new commands to every group (concurrently, each
// through its current leader, none on node except) and returns them.
func (c *muxCluster) applyAll(tag string, n int, except int) map[uint64][]string {
	c.t.Helper()
	out := make(map[uint64][]string)
	var wg sync.WaitGroup
	for _, g := range c.groups {
		cmds := make([]string, n)
		for k := range cmds {
			cmds[k] = fmt.Sprintf("%s/g%d/%d", tag, g, k)
		}
		out[g] = cmds
		leader := c.waitLeader(g, except)
		wg.Go(func() { c.apply(leader, g, cmds) })
	}
	wg.Wait()
	if c.t.Failed() {
		c.t.FailNow()
	}
	return out
}

// waitReplicated waits until the FSM of every replica of every group on
// nodes holds exactly want[g], in order.
func (c *muxCluster) waitReplicated(want map[uint64][]string, nodes ...int) {
	c.t.Helper()
	for _, i := range nodes {
		for _, g := range c.groups {
			fsm := c.nodes[i].replicas[g].fsm
			waitFor(c.t, fmt.Sprintf("node %d group %d: %d commands", i, g, len(want[g])), func() bool {
				return slices.Equal(fsm.commands(), want[g])
			})
		}
	}
}

func concat(a, b map[uint64][]string) map[uint64][]string {
	out := make(map[uint64][]string)
	for g := range a {
		out[g] = slices.Concat(a[g], b[g])
	}
	return out
}

// TestTransportReplicatesGroups: 3 nodes, 3 groups across them, one
// listener per node. Every group elects a leader and replicates what it
// applies to both followers.
func TestTransportReplicatesGroups(t *testing.T) {
	c := startMuxCluster(t, 3, []uint64{1, 2, 3})
	want := c.applyAll("a", 200, -1)
	c.waitReplicated(want, 0, 1, 2)
}

// TestTransportIsolateLeader: isolating the node that leads group 1 makes
// the other two elect a new leader of group 1 and keep committing in every
// group; after Heal the isolated node catches up.
func TestTransportIsolateLeader(t *testing.T) {
	c := startMuxCluster(t, 3, []uint64{1, 2, 3})
	before := c.applyAll("before", 20, -1)
	c.waitReplicated(before, 0, 1, 2)

	old := c.waitLeader(1, -1)
	c.nodes[old].faults.Isolate()
	during := c.applyAll("during", 20, old) // leaders on the other two only
	var others []int
	for i := range c.nodes {
		if i != old {
			others = append(others, i)
		}
	}
	all := concat(before, during)
	c.waitReplicated(all, others...)
	for _, g := range c.groups {
		if got := c.nodes[old].replicas[g].fsm.commands(); len(got) > len(before[g]) {
			t.Fatalf("group %d: isolated node applied %d commands, want %d", g, len(got), len(before[g]))
		}
	}

	c.nodes[old].faults.Heal()
	c.waitReplicated(all, old)
	after := c.applyAll("after", 20, -1)
	c.waitReplicated(concat(all, after), 0, 1, 2)
}
