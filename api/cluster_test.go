package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/shard"
)

// testView is a ClusterView over a fixed map: what the routing needs,
// without the control group. Drain runs drain when set, else refuses as a
// node that does not lead the control group.
type testView struct {
	self cluster.NodeID

	mu            sync.Mutex
	m             *cluster.Map
	alive         map[cluster.NodeID]bool
	controlLeader cluster.NodeID
	controlTerm   uint64
	drain         func(ctx context.Context, id cluster.NodeID, force bool) (cluster.DrainStatus, error)
}

var _ api.ClusterView = (*testView)(nil)

func (v *testView) Self() cluster.NodeID { return v.self }

func (v *testView) Map() *cluster.Map {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		return nil
	}
	return v.m.Clone()
}

func (v *testView) Alive() map[cluster.NodeID]bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[cluster.NodeID]bool, len(v.alive))
	for id, ok := range v.alive {
		out[id] = ok
	}
	return out
}

func (v *testView) ControlLeader() cluster.NodeID {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.controlLeader
}

func (v *testView) ControlState() string {
	if v.ControlLeader() == v.self {
		return "Leader"
	}
	return "Follower"
}

func (v *testView) ControlTerm() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.controlTerm
}

func (v *testView) Drain(ctx context.Context, id cluster.NodeID, force bool) (cluster.DrainStatus, error) {
	v.mu.Lock()
	drain := v.drain
	v.mu.Unlock()
	if drain == nil {
		return cluster.DrainStatus{}, fmt.Errorf("%w (leader: %q)", cluster.ErrNotControlLeader, v.ControlLeader())
	}
	return drain(ctx, id, force)
}

func (v *testView) Ready() bool { return v.Map() != nil }

// CurrentEpoch: the view's map is current on the node it names leader.
func (v *testView) CurrentEpoch(context.Context) (uint64, error) {
	m := v.Map()
	if m == nil || v.ControlLeader() != v.self {
		return 0, cluster.ErrNotControlLeader
	}
	return m.Epoch, nil
}

// Test cluster geometry: few slots and two shards keep keys easy to place.
const (
	testSlots  = 64
	testShards = 2
	testEpoch  = 7
	// testTerm is the control term every test node knows.
	testTerm = 3
)

// testNode is one node of a test cluster: a shard host replicating over
// its Raft mux, and the API server on its own gRPC port.
type testNode struct {
	id   cluster.NodeID
	view *testView
	host *shard.Host
	mux  *raftlog.Mux
	srv  *api.Server
	grpc *grpc.Server
	addr string
}

// testCluster is n nodes on loopback, each with a shard host replicating
// over its own Raft mux and an API server routing by a view holding the
// same map. The map's preferred leaders need not be the real ones: routing
// must follow the replicas.
type testCluster struct {
	t     *testing.T
	nodes []*testNode
	m     *cluster.Map
}

// startCluster starts n nodes. With sets nil, every node holds a replica
// of every shard (static voters over the mux, as shard's own replication
// tests), and the map says so. Otherwise sets[s] lists the indexes of the
// nodes the map gives shard s, preferred leader first; the hosts are
// Manual and the test starts the replicas it wants. tune adjusts every
// host's config.
func startCluster(t *testing.T, n int, sets [][]int, tune ...func(*shard.HostConfig)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, m: &cluster.Map{Epoch: testEpoch, Slots: testSlots, Shards: testShards, Replicas: n,
		Nodes: map[cluster.NodeID]cluster.NodeInfo{}}}
	var peers []raft.Server
	lis := make([]net.Listener, n)
	for i := range n {
		id := cluster.NodeID(fmt.Sprint("n", i))
		mux, err := raftlog.ListenMux("127.0.0.1:0", raftlog.MuxConfig{})
		if err != nil {
			t.Fatal(err)
		}
		lis[i] = listen(t)
		node := &testNode{id: id, mux: mux, addr: lis[i].Addr().String()}
		tc.nodes = append(tc.nodes, node)
		t.Cleanup(func() { tc.stop(node) })
		peers = append(peers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(mux.Addr().String())})
		tc.m.Nodes[id] = cluster.NodeInfo{ID: id, GRPCAddr: node.addr, RaftAddr: mux.Addr().String(), State: cluster.NodeActive}
	}
	if sets == nil {
		for s := range testShards {
			sets = append(sets, []int{s % n})
			for i := range n {
				if i != s%n {
					sets[s] = append(sets[s], i)
				}
			}
		}
	} else {
		peers = nil
	}
	for _, set := range sets {
		rs := []cluster.NodeID{}
		for _, i := range set {
			rs = append(rs, tc.nodes[i].id)
		}
		tc.m.ShardReplicas = append(tc.m.ShardReplicas, rs)
	}
	if err := tc.m.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, node := range tc.nodes {
		hc := shard.HostConfig{NodeID: string(node.id), DataDir: t.TempDir(), Slots: testSlots, Shards: testShards,
			Mux: node.mux, Peers: peers, Manual: peers == nil, TickInterval: time.Hour, NoSync: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		for _, f := range tune {
			f(&hc)
		}
		host, err := shard.OpenHost(hc)
		if err != nil {
			t.Fatal(err)
		}
		node.host = host
		node.view = &testView{self: node.id, m: tc.m.Clone(), alive: map[cluster.NodeID]bool{}, controlLeader: tc.nodes[0].id, controlTerm: testTerm}
		for _, other := range tc.nodes {
			node.view.alive[other.id] = true
		}
		node.srv = api.NewServer(host, api.Options{Cluster: node.view})
		node.grpc = node.srv.NewGRPCServer()
		go func() { _ = node.grpc.Serve(lis[i]) }()
	}
	return tc
}

// stop stops a node's gRPC server, then its host, then its mux.
func (tc *testCluster) stop(n *testNode) {
	if n.grpc != nil {
		n.grpc.Stop()
		n.srv.Shutdown()
	}
	if n.host != nil {
		_ = n.host.Close()
	}
	_ = n.mux.Close()
}

// leader waits until shard s has a leader that serves (a linearizable
// read through it succeeds) and every replica knows it; it returns the
// leader's node.
func (tc *testCluster) leader(s int) *testNode {
	tc.t.Helper()
	var l *testNode
	waitFor(tc.t, fmt.Sprintf("a serving leader of shard %d known to every replica", s), func() bool {
		l = nil
		for _, n := range tc.nodes {
			if r := n.host.Shard(s); r != nil && r.IsLeader() {
				l = n
			}
		}
		if l == nil {
			return false
		}
		for _, n := range tc.nodes {
			if r := n.host.Shard(s); r != nil {
				if id, _ := r.Leader(); id != string(l.id) {
					return false
				}
			}
		}
		_, err := dial(tc.t, l.addr).Get(redirectOnly(tc.t), &gridpb.GetRequest{Namespace: []byte("probe"), Key: keyOf(tc.t, s, "probe", 0)})
		return err == nil
	})
	return l
}

// follower returns a node that does not lead shard s.
func (tc *testCluster) follower(s int) *testNode {
	l := tc.leader(s)
	for _, n := range tc.nodes {
		if n != l {
			return n
		}
	}
	tc.t.Fatal("no follower")
	return nil
}

// keyOf returns the i-th key with prefix whose record (namespace "ns" when
// prefix is not "probe") lives on shard s.
func keyOf(t testing.TB, s int, prefix string, i int) []byte {
	ns := "ns"
	if prefix == "probe" {
		ns = "probe"
	}
	for j := 0; j < 10000; j++ {
		k := []byte(fmt.Sprintf("%s-%d", prefix, j))
		d := keyspace.RecordDigest(ns, k, nil)
		if int(uint64(d.Slot(testSlots))*testShards/testSlots) == s {
			if i == 0 {
				return k
			}
			i--
		}
	}
	t.Fatalf("no key %d of shard %d", i, s)
	return nil
}

// redirectOnly is a test context asking for Redirects instead of
// forwarding.
func redirectOnly(t *testing.T) context.Context {
	return metadata.AppendToOutgoingContext(ctx(t), api.MetadataRedirect, "1")
}

// redirectDetail returns the Redirect detail of a status error.
func redirectDetail(err error) *gridpb.Redirect {
	for _, d := range status.Convert(err).Details() {
		if rd, ok := d.(*gridpb.Redirect); ok {
			return rd
		}
	}
	return nil
}

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func reserveOp(key []byte) *gridpb.Op {
	return &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: key, LeaseMs: 60000}}}
}

// getOp is a Get in the operator view (show_token), so that a test can tell
// which grant the read saw.
func getOp(key []byte, stale bool) *gridpb.Op {
	return &gridpb.Op{Op: &gridpb.Op_Get{Get: &gridpb.GetRequest{Namespace: []byte("ns"), Key: key, StaleOk: stale, ShowToken: true}}}
}

// sameRedirect reports whether got names shard s led by node l at the
// test map's epoch.
func sameRedirect(got *gridpb.Redirect, s int, l *testNode) bool {
	return got != nil && got.Shard == uint32(s) && got.LeaderId == string(l.id) && got.LeaderAddr == l.addr && got.Epoch == testEpoch
}

// startViewNode serves a one-node host (every shard a one-voter group on an
// in-memory transport) in cluster mode with view: for the RPCs that need a
// cluster view but no replication.
func startViewNode(t *testing.T, view *testView, lis net.Listener) *testNode {
	t.Helper()
	host, err := shard.OpenHost(shard.HostConfig{NodeID: string(view.self), DataDir: t.TempDir(), Slots: testSlots, Shards: testShards,
		TickInterval: time.Hour, NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{id: view.self, view: view, host: host, srv: api.NewServer(host, api.Options{Cluster: view}), addr: lis.Addr().String()}
	n.grpc = n.srv.NewGRPCServer()
	go func() { _ = n.grpc.Serve(lis) }()
	t.Cleanup(func() {
		n.grpc.Stop()
		n.srv.Shutdown()
		_ = host.Close()
	})
	return n
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}
