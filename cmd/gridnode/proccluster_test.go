package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/testwait"
)

// procCluster is a cluster of gridnode serve processes, on loopback or, to
// be cut off one by one, each in its own network namespace of a netLab.
type procCluster struct {
	tb    testing.TB
	dir   string
	lab   *netLab // nil: loopback
	nodes []*procNode
	flags []string // more serve flags for every node, at every start
}

type procNode struct {
	id                 string
	grpc, raft, gossip string
	wrap               []string // the command prefix that runs it (its namespace); nil: none
	joiner             bool     // started later, with --join only (join)
	log                *os.File
	p                  *proc // nil while down
}

// Ports of a node in a netLab, where each node has an address of its own.
const (
	labGRPCPort   = 7420
	labRaftPort   = 7421
	labGossipPort = 7422
)

// startProcCluster starts n gridnode processes that form one cluster on
// loopback ports and waits until each has printed its ready line.
func startProcCluster(tb testing.TB, n int, flags ...string) *procCluster {
	tb.Helper()
	return startProcClusterIn(tb, n, nil, flags...)
}

// startProcClusterIn is startProcCluster with node i in lab's namespace
// i, or on loopback when lab is nil.
func startProcClusterIn(tb testing.TB, n int, lab *netLab, flags ...string) *procCluster {
	tb.Helper()
	pc := &procCluster{tb: tb, dir: tb.TempDir(), lab: lab, flags: flags}
	var free []string
	if lab == nil {
		free = freeAddrs(tb, 3*n)
	}
	for i := range n {
		node := &procNode{id: fmt.Sprintf("node-%d", i+1)}
		if lab == nil {
			node.grpc, node.raft, node.gossip = free[3*i], free[3*i+1], free[3*i+2]
		} else {
			ip := lab.nodeIP(i)
			node.grpc = net.JoinHostPort(ip, fmt.Sprint(labGRPCPort))
			node.raft = net.JoinHostPort(ip, fmt.Sprint(labRaftPort))
			node.gossip = net.JoinHostPort(ip, fmt.Sprint(labGossipPort))
			node.wrap = lab.wrap(i)
		}
		pc.nodes = append(pc.nodes, node)
	}
	// Registered first, so that a node that fails to start shows its log.
	tb.Cleanup(func() {
		if tb.Failed() {
			pc.dumpLogs()
		}
	})
	for i := range pc.nodes {
		pc.launch(i)
	}
	for i := range pc.nodes {
		pc.waitReady(i)
	}
	return pc
}

// launch starts node i with the command line an operator would use, the
// same at every start: it bootstraps the cluster the first time and
// rejoins it afterwards.
func (pc *procCluster) launch(i int) {
	n := pc.nodes[i]
	var join []string
	for _, o := range pc.nodes {
		if o != n {
			join = append(join, o.gossip)
		}
	}
	if n.log == nil {
		f, err := os.Create(filepath.Join(pc.dir, n.id+".log"))
		if err != nil {
			pc.tb.Fatal(err)
		}
		pc.tb.Cleanup(func() { f.Close() })
		n.log = f
	}
	args := []string{"--node-id", n.id, "--data-dir", filepath.Join(pc.dir, n.id),
		"--listen", n.grpc, "--raft-listen", n.raft, "--gossip-listen", n.gossip, "--http-listen", "",
		"--join", strings.Join(join, ","), "--log-level", "warn"}
	args = append(args, pc.flags...)
	if !n.joiner {
		args = append(args, "--bootstrap-expect", fmt.Sprint(len(pc.nodes)))
	}
	n.p = launchProcIn(pc.tb, n.log, n.wrap, args...)
}

// join starts one more node on loopback, as an operator adds a node to a
// running cluster (--join, no --bootstrap-expect), waits for its ready
// line and returns its index.
func (pc *procCluster) join() int {
	pc.tb.Helper()
	if pc.lab != nil {
		pc.tb.Fatal("join is for clusters on loopback")
	}
	var taken []string
	for _, o := range pc.nodes {
		taken = append(taken, o.grpc, o.raft, o.gossip)
	}
	free := freeAddrs(pc.tb, 3, taken...)
	n := &procNode{id: fmt.Sprintf("node-%d", len(pc.nodes)+1), joiner: true, grpc: free[0], raft: free[1], gossip: free[2]}
	pc.nodes = append(pc.nodes, n)
	i := len(pc.nodes) - 1
	pc.launch(i)
	pc.waitReady(i)
	return i
}

func (pc *procCluster) waitReady(i int) {
	pc.tb.Helper()
	pc.nodes[i].p.waitReady(pc.tb, 60*time.Second)
}

// The faults, each undone by the one after it.

func (pc *procCluster) kill9(i int) {
	pc.tb.Helper()
	pc.nodes[i].p.kill9(pc.tb)
	pc.nodes[i].p = nil
}

// restart starts node i again on its data directory, after a kill.
func (pc *procCluster) restart(i int) {
	pc.tb.Helper()
	pc.launch(i)
	pc.waitReady(i)
}

// pause freezes node i's process with SIGSTOP, and returns once the
// kernel reports it stopped.
func (pc *procCluster) pause(i int) {
	pc.tb.Helper()
	pc.signal(i, syscall.SIGSTOP)
	stat := fmt.Sprintf("/proc/%d/stat", pc.nodes[i].p.PID())
	testwait.For(pc.tb, 5*time.Second, pc.nodes[i].id+" stopped", func() bool {
		b, err := os.ReadFile(stat)
		// The state follows the command name, which is in parentheses.
		end := strings.LastIndex(string(b), ") ")
		return err == nil && end >= 0 && strings.HasPrefix(string(b[end+2:]), "T")
	})
}

// resume lets node i's process run again with SIGCONT.
func (pc *procCluster) resume(i int) { pc.signal(i, syscall.SIGCONT) }

// isolate cuts node i off the network (its namespace's link to the
// bridge); only for a cluster in a netLab.
func (pc *procCluster) isolate(i int) { pc.needLab().isolate(i) }

// reconnect undoes isolate.
func (pc *procCluster) reconnect(i int) { pc.needLab().reconnect(i) }

func (pc *procCluster) signal(i int, sig syscall.Signal) {
	pc.tb.Helper()
	if err := pc.nodes[i].p.Signal(sig); err != nil {
		pc.tb.Fatalf("%v to %s: %v", sig, pc.nodes[i].id, err)
	}
}

func (pc *procCluster) needLab() *netLab {
	if pc.lab == nil {
		pc.tb.Fatal("isolation needs a cluster in network namespaces")
	}
	return pc.lab
}

func (pc *procCluster) addrs() []string {
	var out []string
	for _, n := range pc.nodes {
		out = append(out, n.grpc)
	}
	return out
}

// dumpLogs prints the end of each node's log (a failed test).
func (pc *procCluster) dumpLogs() {
	for _, n := range pc.nodes {
		b, err := os.ReadFile(filepath.Join(pc.dir, n.id+".log"))
		if err != nil {
			continue
		}
		if len(b) > 8<<10 {
			b = b[len(b)-8<<10:]
		}
		pc.tb.Logf("log of %s (end):\n%s", n.id, b)
	}
}

// ledBy is the shards that node i's Status reports it leads.
func (pc *procCluster) ledBy(ctx context.Context, i int) []int {
	st, err := nodeStatus(ctx, pc.nodes[i].grpc)
	if err != nil {
		pc.tb.Fatalf("status of %s: %v", pc.nodes[i].id, err)
	}
	var led []int
	for _, s := range st.Shards {
		if s.RaftState == "Leader" {
			led = append(led, int(s.ID))
		}
	}
	return led
}

// shardLeader is the index of the node whose replica of shard leads it, by
// the nodes' Status; -1 when none does.
func (pc *procCluster) shardLeader(ctx context.Context, shard uint32) int {
	for i, n := range pc.nodes {
		if n.p == nil {
			continue
		}
		st, err := nodeStatus(ctx, n.grpc)
		if err != nil {
			continue
		}
		for _, s := range st.Shards {
			if s.ID == shard && s.RaftState == "Leader" {
				return i
			}
		}
	}
	return -1
}

// waitHealthy waits until, by the map and every node's Status, each shard
// has a leader and every replica follows it closely: the state after a
// restarted node has caught up.
func (pc *procCluster) waitHealthy(c *client.Client, timeout time.Duration) {
	pc.tb.Helper()
	testwait.Until(pc.tb, timeout, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if why := pc.unhealthy(ctx, c); why != "" {
			return "cluster not healthy: " + why
		}
		return ""
	})
}

func (pc *procCluster) unhealthy(ctx context.Context, c *client.Client) string {
	m, err := c.ClusterMap(ctx)
	if err != nil {
		return err.Error()
	}
	if len(m.Shards) != m.ShardCount {
		return fmt.Sprintf("%d shards in the map of %d", len(m.Shards), m.ShardCount)
	}
	st := buildClusterStatus(m, fetchStatuses(ctx, m, client.Status{}))
	for _, sh := range st.Shards {
		if len(sh.Replicas) != len(pc.nodes) {
			return fmt.Sprintf("shard %d has %d replicas", sh.ID, len(sh.Replicas))
		}
		for _, r := range sh.Replicas {
			if r.Health != healthLeader && (r.Lag == nil || *r.Lag > 16) {
				return fmt.Sprintf("shard %d replica on %s: %s", sh.ID, r.Node, replicaLabel(r))
			}
		}
	}
	return ""
}

// freeAddrs returns n distinct loopback addresses, none of taken, whose
// ports were free for TCP and UDP (memberlist binds both) a moment ago.
// The ports are drawn below the kernel's ephemeral range when they can be:
// a port from that range, freed here and bound by a node a moment later,
// can meanwhile become the local port of any process's outgoing
// connection, and the node then fails to start.
func freeAddrs(tb testing.TB, n int, taken ...string) []string {
	tb.Helper()
	low := ephemeralLow()
	var out []string
	for try := 0; len(out) < n; try++ {
		if try == 50*n {
			tb.Fatal("no free port")
		}
		port := 0
		if low > minDrawnPort {
			port = minDrawnPort + rand.IntN(low-minDrawnPort)
		}
		lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if port == 0 {
				tb.Fatal(err)
			}
			continue
		}
		addr := lis.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		lis.Close()
		if err != nil {
			continue
		}
		pc.Close()
		if !slices.Contains(out, addr) && !slices.Contains(taken, addr) {
			out = append(out, addr)
		}
	}
	return out
}

// minDrawnPort is the lowest port freeAddr draws: above the well-known
// and most registered services' ports.
const minDrawnPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux:
// /proc/sys/net/ipv4/ip_local_port_range), or 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}

// dialCluster is a routing client of pc with the default options, as an
// application would use it.
func dialCluster(tb testing.TB, pc *procCluster) *client.Client {
	tb.Helper()
	c, err := client.Dial(context.Background(), strings.Join(pc.addrs(), ","))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// A cluster started without --shards has as few shards as give each
// founding node a replica (3 nodes of 2 replicas: 2 shards, 4 replicas),
// and a node that joins it later, also without --shards, takes the
// cluster's count into its new data directory and hosts replicas (4 over
// 4 nodes); the count is a hard setting of every data directory from then
// on.
func TestClusterShardCountFollowsItsFoundingNodes(t *testing.T) {
	pc := startProcCluster(t, 3, "--replicas", "2")
	x := pc.join()
	c := dialCluster(t, pc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var m client.ClusterMap
	testwait.Until(t, 90*time.Second, func() string {
		var err error
		if m, err = c.ClusterMap(ctx); err != nil {
			return err.Error()
		}
		held := 0
		for _, s := range m.Shards {
			for _, id := range s.Replicas {
				if id == pc.nodes[x].id {
					held++
				}
			}
		}
		if held == 0 {
			return fmt.Sprintf("the joined node %s holds no replica yet (map epoch %d)", pc.nodes[x].id, m.Epoch)
		}
		return ""
	})
	if m.ShardCount != 2 || len(m.Shards) != 2 {
		t.Fatalf("the cluster of 3 founding nodes of 2 replicas has %d shards (%d listed), want 2", m.ShardCount, len(m.Shards))
	}
	for _, n := range pc.nodes {
		b, err := os.ReadFile(filepath.Join(pc.dir, n.id, "hard-settings.json"))
		if err != nil {
			t.Fatal(err)
		}
		var set struct{ Shards int }
		if err := json.Unmarshal(b, &set); err != nil {
			t.Fatal(err)
		}
		if set.Shards != 2 {
			t.Errorf("%s's data directory has %d shards, want the cluster's 2", n.id, set.Shards)
		}
	}
	// Keys are served on every shard, the joined node's replicas included.
	for i := range 30 {
		if _, err := c.Reserve(ctx, "t", fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}
