package raftlog

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/testwait"
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
	trans *Transport
}

type muxCluster struct {
	t      *testing.T
	nodes  []*muxNode
	groups []uint64

	mu         sync.Mutex
	replicated []replication // what each transport's OnReplicate saw
}

// replication is one report of a transport's OnReplicate.
type replication struct {
	from, to raft.ServerID
	group    uint64
	entries  int
	took     time.Duration
}

// addNode starts a new node with an empty replica of every group and adds
// it as a voter to every group, through the group's leader.
func (c *muxCluster) addNode() int {
	t := c.t
	t.Helper()
	f := &Faults{}
	m, err := ListenMux("127.0.0.1:0", MuxConfig{Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	i := len(c.nodes)
	c.nodes = append(c.nodes, &muxNode{mux: m, faults: f, replicas: make(map[uint64]*replica)})
	for _, g := range c.groups {
		c.nodes[i].replicas[g] = c.startReplica(i, g, nil)
	}
	addr := raft.ServerAddress(m.Addr().String())
	for _, g := range c.groups {
		testwait.For(t, 10*time.Second, fmt.Sprintf("group %d: AddVoter %s", g, nodeID(i)), func() bool {
			leader := c.leaderOf(g, i)
			return leader >= 0 && c.nodes[leader].replicas[g].r.AddVoter(nodeID(i), addr, 0, 5*time.Second).Error() == nil
		})
	}
	return i
}

// startMuxCluster starts n nodes hosting every group in groups, with
// in-memory log and snapshot stores and real TCP between the nodes, and
// waits until every group has a leader.
func startMuxCluster(t *testing.T, n int, groups []uint64) *muxCluster {
	t.Helper()
	return startMuxClusterWith(t, n, groups, nil)
}

// startMuxClusterWith is startMuxCluster with setup, if not nil, called
// on each node's Mux before any group starts on it.
func startMuxClusterWith(t *testing.T, n int, groups []uint64, setup func(i int, m *Mux)) *muxCluster {
	t.Helper()
	c := &muxCluster{t: t, groups: groups}
	for i := range n {
		f := &Faults{}
		m, err := ListenMux("127.0.0.1:0", MuxConfig{Faults: f})
		if err != nil {
			t.Fatal(err)
		}
		if setup != nil {
			setup(i, m)
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

// startReplica starts node i's replica of group g, bootstrapping the group
// with servers unless servers is nil.
func (c *muxCluster) startReplica(i int, g uint64, servers []raft.Server) *replica {
	t := c.t
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = nodeID(i)
	conf.HeartbeatTimeout = 200 * time.Millisecond
	conf.ElectionTimeout = 200 * time.Millisecond
	conf.LeaderLeaseTimeout = 200 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.TrailingLogs = 5 // so that a lagging replica needs InstallSnapshot
	conf.Logger = hclog.NewNullLogger()
	onReplicate := func(peer raft.ServerID, entries int, took time.Duration) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.replicated = append(c.replicated, replication{from: nodeID(i), to: peer, group: g, entries: entries, took: took})
	}
	trans, err := NewTransport(c.nodes[i].mux, g, TransportConfig{Timeout: time.Second, OnReplicate: onReplicate})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(trans.LocalAddr()), c.nodes[i].mux.Addr().String(); got != want {
		t.Fatalf("transport LocalAddr %s, want the mux address %s", got, want)
	}
	logs, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	if servers != nil {
		if err := raft.BootstrapCluster(conf, logs, logs, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			t.Fatalf("node %d group %d: bootstrap: %v", i, g, err)
		}
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

// waitLeader waits until a node other than except leads group g and
// returns its index.
func (c *muxCluster) waitLeader(g uint64, except int) int {
	c.t.Helper()
	leader := -1
	testwait.For(c.t, 10*time.Second, fmt.Sprintf("group %d: leader on a node other than %d", g, except), func() bool {
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

// leaderOf returns the node, other than except, whose replica leads group
// g, or -1.
func (c *muxCluster) leaderOf(g uint64, except int) int {
	for i, nd := range c.nodes {
		if i != except && nd.replicas[g].r.State() == raft.Leader {
			return i
		}
	}
	return -1
}

// apply applies cmds to group g in order, pipelined, through its leader
// (never one on node except). If leadership moves mid-batch it applies the
// rest through the new leader; a command whose outcome was unknown may then
// be applied twice, which waitReplicated tolerates.
func (c *muxCluster) apply(g uint64, cmds []string, except int) error {
	deadline := time.Now().Add(10 * time.Second)
	for len(cmds) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("group %d: %d commands not applied within 10s", g, len(cmds))
		}
		leader := c.leaderOf(g, except)
		if leader < 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r := c.nodes[leader].replicas[g].r
		futures := make([]raft.ApplyFuture, len(cmds))
		for k, cmd := range cmds {
			futures[k] = r.Apply([]byte(cmd), 5*time.Second)
		}
		done, err := 0, error(nil)
		for _, f := range futures {
			if err = f.Error(); err != nil {
				break
			}
			done++
		}
		cmds = cmds[done:]
		if err != nil && !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
			return fmt.Errorf("group %d on node %d: %w", g, leader, err)
		}
	}
	return nil
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
		wg.Go(func() {
			if err := c.apply(g, cmds, except); err != nil {
				c.t.Error(err)
			}
		})
	}
	wg.Wait()
	if c.t.Failed() {
		c.t.FailNow()
	}
	return out
}

// waitReplicated waits until, in every group, the replicas on nodes have
// applied the same commands in the same order, and those are want[g] (a
// command applied twice after a leader change counts once).
func (c *muxCluster) waitReplicated(want map[uint64][]string, nodes ...int) {
	c.t.Helper()
	for _, g := range c.groups {
		testwait.For(c.t, 10*time.Second, fmt.Sprintf("group %d: nodes %v hold the same %d commands", g, nodes, len(want[g])), func() bool {
			var first []string
			for k, i := range nodes {
				got := c.nodes[i].replicas[g].fsm.commands()
				if k == 0 {
					first = got
				} else if !slices.Equal(got, first) {
					return false
				}
			}
			return slices.Equal(firstOccurrences(first), want[g])
		})
	}
}

func firstOccurrences(cmds []string) []string {
	seen := make(map[string]bool)
	var out []string
	for _, c := range cmds {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// snapshotAll takes a snapshot of every group on nodes, which compacts
// their logs down to TrailingLogs entries.
func (c *muxCluster) snapshotAll(nodes ...int) {
	c.t.Helper()
	for _, i := range nodes {
		for _, g := range c.groups {
			if err := c.nodes[i].replicas[g].r.Snapshot().Error(); err != nil {
				c.t.Fatalf("node %d group %d: snapshot: %v", i, g, err)
			}
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
