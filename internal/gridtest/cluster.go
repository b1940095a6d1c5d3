package gridtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/machinelock"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/node"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/shard"
)

// ClusterOptions tune an in-process test cluster. Zero values are defaults.
type ClusterOptions struct {
	Nodes    int // default 3
	Replicas int // default 3
	Shards   int // default 4
	// GracePeriod before a missing node's replicas are replaced; default
	// topology.DefaultGracePeriod.
	GracePeriod time.Duration
	// HeartbeatTimeout of every Raft group; default 500 ms, as in
	// production.
	HeartbeatTimeout time.Duration
	// Clock, if set, gives node i its time source (clock-skew tests).
	Clock func(i int) func() time.Time
	// MaxClockOffset is every node's bound on clock offsets; default
	// digest.DefaultMaxClockOffset.
	MaxClockOffset time.Duration
	// HTTP serves each node's /metrics, /healthz and /readyz on a free
	// loopback port (node.Node.HTTPAddr).
	HTTP bool
	// Sync makes the Raft logs fsync as in production (default off).
	Sync bool
	// Logs sends the nodes' logs to stderr (debugging).
	Logs bool
	// WrapRemote, if set, wraps node i's cluster.Remote (the control
	// leader's way to the shards' leaders), e.g. to count what it sends.
	WrapRemote func(i int, r cluster.Remote) cluster.Remote
	// WrapView, if set, wraps node i's cluster runtime as its API server
	// sees it, e.g. to show the server another map.
	WrapView func(i int, v api.ClusterView) api.ClusterView
	// TuneHost, if set, adjusts every node's host config last (slots, tick
	// interval, hot window).
	TuneHost func(*shard.HostConfig)
	// TLS, if set, gives node i its TLS (node.Config.TLS).
	TLS func(i int) node.TLSConfig
	// GossipEncryption, if set, gives node i its gossip keys (nil: none).
	GossipEncryption func(i int) *gossip.Encryption
	// Auth, if set, gives node i its token auth (nil: none), and
	// AuthToken is the token the harness's own calls (Status) present.
	Auth      func(i int) *node.AuthConfig
	AuthToken string
}

// Cluster is a cluster of real nodes in one process: each has its own data
// directory, gRPC, Raft (mux) and gossip ports on loopback, its own
// raftlog.Faults, through which the test partitions and pauses the Raft
// traffic, and its own gossip.Faults, through which Partition cuts
// its gossip too (PartitionRaft leaves gossip up). With gossip cut, each
// side sees the other dead; nothing moves on that within the grace period
// (default 30 s), and after Heal the nodes rejoin each other by themselves.
// Pause stalls the Raft traffic only. CutClientPort closes a node's client
// connections while its replicas and gossip go on. Node indexes are
// 0..n-1; a node keeps its addresses across restarts.
type Cluster struct {
	t     testing.TB
	opts  ClusterOptions
	logs  *logTail // what the nodes logged last, shown when the test fails
	mu    sync.Mutex
	nodes []*clusterNode
	conns map[string]*grpc.ClientConn // by client address: Status calls
}

type clusterNode struct {
	id                 string
	dir                string
	grpc, raft, gossip string
	faults             *raftlog.Faults
	gossipFaults       *gossip.Faults
	clientPort         *clientPort
	node               *node.Node // nil while down
	wedged             bool       // its last stop hung: it cannot start again
}

// StartCluster starts opts.Nodes nodes that form one cluster, and waits
// until every shard has its replicas and every node serves. It stops when
// the test ends.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	// Its Raft groups keep leaders on 500 ms heartbeats: never beside a
	// test that loads the whole machine.
	machinelock.Shared(t)
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Replicas == 0 {
		opts.Replicas = 3
	}
	if opts.Shards == 0 {
		opts.Shards = 4
	}
	c := &Cluster{t: t, opts: opts, logs: newLogTail(logTailLines)}
	root := t.TempDir()
	for i := range opts.Nodes {
		c.nodes = append(c.nodes, newClusterNode(root, i))
	}
	t.Cleanup(func() {
		if t.Failed() && !opts.Logs {
			t.Logf("gridtest: the last lines the nodes logged, oldest first:\n%s", c.logs)
		}
	})
	t.Cleanup(c.Close) // runs first: its own lines are in the tail
	// Node 1 starts first and the others join it: each binds free ports
	// and keeps them across restarts.
	for i := range c.nodes {
		if err := c.start(i, opts.Nodes); err != nil {
			t.Fatalf("gridtest: %v", err)
		}
	}
	c.WaitStable(60 * time.Second)
	return c
}

func newClusterNode(root string, i int) *clusterNode {
	id := fmt.Sprintf("node-%d", i+1)
	return &clusterNode{
		id: id, dir: filepath.Join(root, id), faults: &raftlog.Faults{}, gossipFaults: &gossip.Faults{}, clientPort: &clientPort{},
		grpc: "127.0.0.1:0", raft: "127.0.0.1:0", gossip: "127.0.0.1:0",
	}
}

// start starts node i; expect is its bootstrap-expect (0 after the first
// start: a restarted node rejoins).
func (c *Cluster) start(i, expect int) error {
	c.mu.Lock()
	n := c.nodes[i]
	var join []string
	for j, o := range c.nodes {
		if j != i && o.gossip != "127.0.0.1:0" {
			join = append(join, o.gossip)
		}
	}
	c.mu.Unlock()
	logger := slog.New(slog.NewTextHandler(c.logs, nil)).With("node", n.id)
	if c.opts.Logs {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", n.id)
	}
	var clock func() time.Time
	if c.opts.Clock != nil {
		clock = c.opts.Clock(i)
	}
	var wrap func(cluster.Remote) cluster.Remote
	if c.opts.WrapRemote != nil {
		wrap = func(r cluster.Remote) cluster.Remote { return c.opts.WrapRemote(i, r) }
	}
	var wrapView func(api.ClusterView) api.ClusterView
	if c.opts.WrapView != nil {
		wrapView = func(v api.ClusterView) api.ClusterView { return c.opts.WrapView(i, v) }
	}
	httpListen := ""
	if c.opts.HTTP {
		httpListen = "127.0.0.1:0"
	}
	hc := shard.HostConfig{NodeID: n.id, DataDir: n.dir, Shards: c.opts.Shards, Clock: clock, NoSync: !c.opts.Sync,
		MaxClockOffset: c.opts.MaxClockOffset}
	if c.opts.TuneHost != nil {
		c.opts.TuneHost(&hc)
	}
	var tlsConf node.TLSConfig
	if c.opts.TLS != nil {
		tlsConf = c.opts.TLS(i)
	}
	var gossipEnc *gossip.Encryption
	if c.opts.GossipEncryption != nil {
		gossipEnc = c.opts.GossipEncryption(i)
	}
	var auth *node.AuthConfig
	if c.opts.Auth != nil {
		auth = c.opts.Auth(i)
	}
	nd, err := node.Start(node.Config{
		TLS:        tlsConf,
		Auth:       auth,
		Host:       hc,
		Listen:     n.grpc,
		HTTPListen: httpListen,
		Logger:     logger,
		Cluster: &node.ClusterConfig{
			RaftListen: n.raft, GossipListen: n.gossip, Join: join,
			BootstrapExpect: expect, Replicas: c.opts.Replicas, GracePeriod: c.opts.GracePeriod,
			Gossip: gossip.FastTiming(), HeartbeatTimeout: c.opts.HeartbeatTimeout,
			GossipEncryption: gossipEnc,
		},
		Knobs: node.TestingKnobs{WrapListener: n.clientPort.wrap, RaftFaults: n.faults, GossipFaults: n.gossipFaults,
			WrapRemote: wrap, WrapView: wrapView},
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", n.id, err)
	}
	c.mu.Lock()
	n.node = nd
	n.grpc, n.raft, n.gossip = nd.Addr(), nd.RaftAddr(), nd.Cluster().GossipAddr()
	c.mu.Unlock()
	return nil
}

// Addrs are the nodes' client (gRPC) addresses.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.grpc
	}
	return out
}

// Node returns node i, nil while it is down.
func (c *Cluster) Node(i int) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].node
}

// ID is node i's id.
func (c *Cluster) ID(i int) string { return c.nodes[i].id }

// Index returns the index of the node with id, or -1.
func (c *Cluster) Index(id string) int {
	for i, n := range c.nodes {
		if n.id == id {
			return i
		}
	}
	return -1
}

// Map returns the newest cluster map a running node holds. A node cut out
// of the control group (a drained node once the group drops it) keeps the
// map it last applied, so the first node's map can be stale.
func (c *Cluster) Map() *topology.Map {
	c.mu.Lock()
	defer c.mu.Unlock()
	var newest *topology.Map
	for _, n := range c.nodes {
		if n.node != nil {
			if m := n.node.Cluster().Map(); m != nil && (newest == nil || m.Epoch > newest.Epoch) {
				newest = m
			}
		}
	}
	return newest
}

// WaitStable waits until the running nodes agree on a map in which every
// shard has its replicas on running nodes, each replica runs, every running
// node serves, and each shard's group, as the node leading it reports it
// in Status, has exactly the map's replicas as voters and no other member,
// in a committed configuration (see Group: a server that does not report
// its configuration is judged by the leader's latest one).
func (c *Cluster) WaitStable(timeout time.Duration) {
	c.t.Helper()
	if err := c.AwaitStable(timeout); err != nil {
		c.t.Fatal(err)
	}
}

// AwaitStable is WaitStable reporting failure as an error, for callers off
// the test's goroutine (fault injectors).
func (c *Cluster) AwaitStable(timeout time.Duration) error {
	var why string
	if testwait.Holds(timeout, func() bool { why = c.unstable(); return why == "" }) {
		return nil
	}
	return fmt.Errorf("gridtest: cluster not stable after %v: %s", timeout, why)
}

func (c *Cluster) unstable() string {
	m, up, why := c.agreedMap()
	if why != "" {
		return why
	}
	want := min(m.Replicas, len(up))
	for s, set := range m.ShardReplicas {
		if len(set) != want {
			return fmt.Sprintf("shard %d has %d replicas, want %d", s, len(set), want)
		}
		for _, id := range set {
			if !up[id] {
				return fmt.Sprintf("shard %d has a replica on %s, which is down", s, id)
			}
		}
		if why := c.groupMatches(s, set); why != "" {
			return why
		}
	}
	return ""
}

// agreedMap returns the map every running node holds and the running
// nodes, or why there is none yet (a node without the map or not ready,
// maps of different epochs).
func (c *Cluster) agreedMap() (*topology.Map, map[topology.NodeID]bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var m *topology.Map
	up := map[topology.NodeID]bool{}
	for _, n := range c.nodes {
		if n.node == nil {
			continue
		}
		up[topology.NodeID(n.id)] = true
		nm := n.node.Cluster().Map()
		switch {
		case nm == nil:
			return nil, nil, n.id + " has no map"
		case m == nil:
			m = nm
		case nm.Epoch != m.Epoch:
			return nil, nil, fmt.Sprintf("maps differ: epoch %d and %d", m.Epoch, nm.Epoch)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		err := n.node.WaitReady(ctx)
		cancel()
		if err != nil {
			_, why := n.node.Cluster().Readiness()
			return nil, nil, n.id + " not ready: " + why
		}
	}
	if m == nil {
		return nil, nil, "no node runs"
	}
	return m, up, ""
}

// Kill stops node i without a goodbye: its Raft traffic is cut first, so
// no leadership is handed over and its peers see it vanish. (In-process,
// its acknowledged writes are still on disk; the kill -9 tests with
// gridnode processes cover unsynced state.)
func (c *Cluster) Kill(i int) {
	n, nd := c.take(i)
	if nd == nil {
		return
	}
	n.faults.Isolate()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.stopNode(ctx, n, nd); errors.Is(err, errStopHung) {
		c.t.Errorf("gridtest: kill: %v", err)
	}
	n.faults.Heal()
}

// stopHang bounds how long a node's Stop may take once its RPCs are cut
// off (ctx): past it the node is wedged, which is a bug to report, not a
// reason to hang the test binary until its timeout.
const stopHang = 30 * time.Second

// errStopHung: a node did not stop within stopHang.
var errStopHung = errors.New("stop hung")

// stopNode stops nd, which was n's, waiting at most stopHang. When it
// hangs, n is marked wedged (its data directory stays locked by the stuck
// instance: it cannot start again) and every goroutine's stack is written
// to a file that outlives the test, named in the error.
func (c *Cluster) stopNode(ctx context.Context, n *clusterNode, nd *node.Node) error {
	done := make(chan error, 1)
	go func() { done <- nd.Stop(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(stopHang):
	}
	c.mu.Lock()
	n.wedged = true
	c.mu.Unlock()
	where := "(no dump)"
	if f, err := os.CreateTemp("", "gridtest-stop-hung-*.txt"); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(f, 2)
		_ = f.Close()
		where = f.Name()
	}
	return fmt.Errorf("gridtest: %s: %w for %v (a Raft group or the runtime did not shut down); goroutines in %s", n.id, errStopHung, stopHang, where)
}

// take marks node i down and returns it with its running instance (nil
// when it was down already).
func (c *Cluster) take(i int) (*clusterNode, *node.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	nd := n.node
	n.node = nil
	return n, nd
}

// Stop stops node i cleanly (a SIGTERM: it hands its leaderships over).
func (c *Cluster) Stop(i int) {
	n, nd := c.take(i)
	if nd == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.stopNode(ctx, n, nd); err != nil {
		c.t.Errorf("gridtest: stop %s: %v", n.id, err)
	}
}

// Restart stops node i cleanly if it runs and starts it again on the same
// data directory and addresses; it returns once the node serves.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Stop(i)
	if err := c.StartNodes(i); err != nil {
		c.t.Fatal(err)
	}
}

// StartNodes starts the given nodes, which are down (killed or stopped),
// on their data directories and addresses, all at once, and waits up to
// 30 s until each serves. Starting them together is what a full-cluster
// restart needs: a node serves only once its shards have leaders, which
// takes a quorum of the others back. It reports failure as an error, for
// callers off the test's goroutine; a node already running is an error.
func (c *Cluster) StartNodes(idx ...int) error {
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for k, i := range idx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Node(i) != nil {
				errs[k] = fmt.Errorf("gridtest: start %s: it runs", c.nodes[i].id)
				return
			}
			c.mu.Lock()
			wedged := c.nodes[i].wedged
			c.mu.Unlock()
			if wedged {
				errs[k] = fmt.Errorf("gridtest: start %s: its last stop hung: %w", c.nodes[i].id, errStopHung)
				return
			}
			// A process that is started again is not stopped (SIGSTOP)
			// any more; a partition it was in still holds.
			c.nodes[i].faults.Resume()
			if err := c.start(i, 0); err != nil {
				errs[k] = fmt.Errorf("gridtest: %w", err)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if n := c.Node(i); n != nil {
				if err := n.WaitReady(ctx); err != nil {
					errs[k] = fmt.Errorf("gridtest: restart %s: %w", c.nodes[i].id, err)
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Launch starts node i, which is down, on its data directory and
// addresses, and returns without waiting for it to serve (a node that
// cannot serve yet: cut off, or removed from the cluster).
func (c *Cluster) Launch(i int) error {
	if c.Node(i) != nil {
		return fmt.Errorf("gridtest: start %s: it runs", c.nodes[i].id)
	}
	c.nodes[i].faults.Resume()
	return c.start(i, 0)
}

// Wipe deletes the data directory of node i, which is down: it starts
// again as a new incarnation under the same id and addresses.
func (c *Cluster) Wipe(i int) error {
	if c.Node(i) != nil {
		return fmt.Errorf("gridtest: wipe %s: it runs", c.nodes[i].id)
	}
	return os.RemoveAll(c.nodes[i].dir)
}

// Partition cuts the Raft and the gossip traffic between the groups; nodes
// not named are isolated alone. Partitions add up until Heal.
func (c *Cluster) Partition(groups ...[]int) { c.partition(true, true, groups) }

// PartitionRaft is Partition for the Raft traffic alone: gossip stays up,
// and every node goes on seeing every other alive.
func (c *Cluster) PartitionRaft(groups ...[]int) { c.partition(true, false, groups) }

// PartitionGossip is Partition for the gossip traffic alone: Raft stays
// up, while the groups see one another fail and, after Heal, come back.
func (c *Cluster) PartitionGossip(groups ...[]int) { c.partition(false, true, groups) }

func (c *Cluster) partition(raft, gossip bool, groups [][]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	group := make([]int, len(c.nodes))
	for i := range group {
		group[i] = -1 - i // alone
	}
	for g, members := range groups {
		for _, i := range members {
			group[i] = g
		}
	}
	for i, a := range c.nodes {
		for j, b := range c.nodes {
			if i != j && group[i] != group[j] {
				if raft {
					a.faults.Block(b.raft)
				}
				if gossip {
					a.gossipFaults.Block(b.gossip)
				}
			}
		}
	}
}

// Heal restores every Raft and gossip link and every client port, and
// resumes paused nodes.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		n.faults.Heal()
		n.faults.Resume()
		n.gossipFaults.Heal()
		n.clientPort.heal()
	}
}

// CutClientPort closes node i's client (gRPC) connections and closes each
// new one as soon as it is accepted, until Heal: its API is gone, as when
// its gRPC server stops, while its replicas, Raft and gossip go on.
func (c *Cluster) CutClientPort(i int) { c.nodes[i].clientPort.cut() }

// Pause stalls node i's Raft traffic, as a stopped process or a black-holed
// network would; Resume (or Heal) lets it go on.
func (c *Cluster) Pause(i int) { c.nodes[i].faults.Pause() }

// Resume ends a Pause.
func (c *Cluster) Resume(i int) { c.nodes[i].faults.Resume() }

// Close stops every running node.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Stop(i)
		}()
	}
	wg.Wait()
	c.closeConns()
}

// Add starts one more node that joins the running cluster, and returns its
// index. It does not wait for the planner to move replicas onto it.
func (c *Cluster) Add() int {
	c.t.Helper()
	c.mu.Lock()
	i := len(c.nodes)
	c.nodes = append(c.nodes, newClusterNode(filepath.Dir(c.nodes[0].dir), i))
	c.mu.Unlock()
	if err := c.start(i, 0); err != nil {
		c.t.Fatalf("gridtest: %v", err)
	}
	return i
}

// AddCutOff is Add for a node whose Raft traffic is cut off from the start
// (gossip works: it is admitted and given replicas, which cannot catch up,
// and it receives no map) until Heal.
func (c *Cluster) AddCutOff() int {
	c.t.Helper()
	c.mu.Lock()
	i := len(c.nodes)
	n := newClusterNode(filepath.Dir(c.nodes[0].dir), i)
	n.faults.Isolate()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	if err := c.start(i, 0); err != nil {
		c.t.Fatalf("gridtest: %v", err)
	}
	return i
}

// ShardOf returns the shard that owns key of namespace ns (no entity), by
// the cluster map; -1 while no running node has a map.
func (c *Cluster) ShardOf(ns, key string) int {
	m := c.Map()
	if m == nil {
		return -1
	}
	return m.ShardOf(digest.Record(ns, []byte(key), nil))
}

// Leaders returns the indexes of the running nodes whose replica of shard s
// leads its group and serves (shard.Replica.IsLeader). Right after a
// partition a cut-off leader may still count itself for up to a leader
// lease, so there may be two; there is none during an election.
func (c *Cluster) Leaders(s int) []int {
	var out []int
	for i := range c.nodes {
		n := c.Node(i)
		if n == nil {
			continue
		}
		if r := n.Host().Replica(s); r != nil && r.IsLeader() {
			out = append(out, i)
		}
	}
	return out
}

// Replicas returns the indexes of the nodes holding a replica of shard s by
// the cluster map (nil while there is no map).
func (c *Cluster) Replicas(s int) []int {
	m := c.Map()
	if m == nil || s < 0 || s >= len(m.ShardReplicas) {
		return nil
	}
	var out []int
	for _, id := range m.ShardReplicas[s] {
		if i := c.Index(string(id)); i >= 0 {
			out = append(out, i)
		}
	}
	return out
}

// TransferLeader hands the leadership of shard s to node to's replica,
// from whichever running replica leads it now, and waits until node to
// leads and serves, or ctx ends. Raft may refuse a transfer (a target not
// caught up, an election racing it): the caller retries.
func (c *Cluster) TransferLeader(ctx context.Context, s, to int) error {
	for _, i := range c.Leaders(s) {
		if i == to {
			return nil
		}
		n := c.Node(i)
		if n == nil {
			continue
		}
		r := n.Host().Replica(s)
		if r == nil {
			continue
		}
		if err := r.TransferLeadership(ctx, c.nodes[to].id, c.nodes[to].raft); err != nil {
			return fmt.Errorf("gridtest: shard %d to %s: %w", s, c.nodes[to].id, err)
		}
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if n := c.Node(to); n != nil {
			if r := n.Host().Replica(s); r != nil && r.IsLeader() {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gridtest: shard %d to %s: %w", s, c.nodes[to].id, ctx.Err())
		case <-t.C:
		}
	}
}
