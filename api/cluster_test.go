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

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/shard"
)

// testView is a ClusterView over a fixed map: what the routing needs,
// without the control group. Drain runs drain when set, else refuses as a
// node that does not lead the control group.
type testView struct {
	self topology.NodeID

	mu            sync.Mutex
	m             *topology.Map
	alive         map[topology.NodeID]bool
	controlLeader topology.NodeID
	controlTerm   uint64
	drain         func(ctx context.Context, id topology.NodeID, force bool) (topology.DrainStatus, error)
}

var _ api.ClusterView = (*testView)(nil)

func (v *testView) Self() topology.NodeID { return v.self }

func (v *testView) Map() *topology.Map {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		return nil
	}
	return v.m.Clone()
}

func (v *testView) Alive() map[topology.NodeID]bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[topology.NodeID]bool, len(v.alive))
	for id, ok := range v.alive {
		out[id] = ok
	}
	return out
}

func (v *testView) ControlLeader() topology.NodeID {
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

func (v *testView) Drain(ctx context.Context, id topology.NodeID, force bool) (topology.DrainStatus, error) {
	v.mu.Lock()
	drain := v.drain
	v.mu.Unlock()
	if drain == nil {
		return topology.DrainStatus{}, fmt.Errorf("%w (leader: %q)", topology.ErrNotControlLeader, v.ControlLeader())
	}
	return drain(ctx, id, force)
}

func (v *testView) Ready() bool { return v.Map() != nil }

// CurrentEpoch: the view's map is current on the node it names leader.
func (v *testView) CurrentEpoch(context.Context) (uint64, error) {
	m := v.Map()
	if m == nil || v.ControlLeader() != v.self {
		return 0, topology.ErrNotControlLeader
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

// testNode is a node serving a fixed view (startViewNode): a shard host
// and the API server on its own gRPC port, with no cluster runtime.
type testNode struct {
	id   topology.NodeID
	view *testView
	host *shard.Host
	mux  *raftlog.Mux // nil: every shard a one-voter group in memory
	srv  *api.Server
	grpc *grpc.Server
	addr string
}

// viewLeader waits until shard s has a leader among nodes that serves (a
// linearizable read through it succeeds) and every replica knows it; it
// returns the leader's node.
func viewLeader(t *testing.T, nodes []*testNode, s int) *testNode {
	t.Helper()
	var l *testNode
	testwait.For(t, 20*time.Second, fmt.Sprintf("a serving leader of shard %d known to every replica", s), func() bool {
		l = nil
		for _, n := range nodes {
			if r := n.host.Replica(s); r != nil && r.IsLeader() {
				l = n
			}
		}
		if l == nil {
			return false
		}
		for _, n := range nodes {
			if r := n.host.Replica(s); r != nil {
				if id, _ := r.Leader(); id != string(l.id) {
					return false
				}
			}
		}
		_, err := gridtest.Dial(t, l.addr).Get(redirectOnly(t), &gridpb.GetRequest{Namespace: []byte("probe"), Key: keyOf(t, s, "probe", 0)})
		return err == nil
	})
	return l
}

// member is a node of a testCluster.
type member struct {
	i    int // its index in the gridtest cluster
	id   topology.NodeID
	addr string
}

// testCluster is three real nodes (gridtest: the cluster runtime, its
// control group and placement) in the test geometry, replicating both
// shards on all of them.
type testCluster struct {
	*gridtest.Cluster
	t     *testing.T
	nodes []*member
}

// startCluster starts a testCluster; opts adds to the geometry (Nodes,
// Replicas, Shards and the slots are the test's), and TuneHost, if set,
// adjusts every host's config after the geometry.
func startCluster(t *testing.T, opts gridtest.ClusterOptions) *testCluster {
	t.Helper()
	tune := opts.TuneHost
	opts.Nodes, opts.Replicas, opts.Shards = 3, 3, testShards
	opts.TuneHost = func(c *shard.HostConfig) {
		c.Slots = testSlots
		if tune != nil {
			tune(c)
		}
	}
	tc := &testCluster{Cluster: gridtest.StartCluster(t, opts), t: t}
	addrs := tc.Addrs()
	for i := range addrs {
		tc.nodes = append(tc.nodes, &member{i: i, id: topology.NodeID(tc.ID(i)), addr: addrs[i]})
	}
	return tc
}

// host is n's shard host.
func (tc *testCluster) host(n *member) *shard.Host { return tc.Node(n.i).Host() }

// leader waits until shard s has a single leader that serves (a
// linearizable read through it succeeds), every replica knows it, and it
// is the map's preferred leader (the control leader restores the
// preferred leader after an election, so the leadership then stays); it
// returns the leader's node.
func (tc *testCluster) leader(s int) *member {
	tc.t.Helper()
	var l *member
	testwait.For(tc.t, 20*time.Second, fmt.Sprintf("a serving preferred leader of shard %d known to every replica", s), func() bool {
		m, ls := tc.Map(), tc.Leaders(s)
		if m == nil || len(ls) != 1 || m.ShardReplicas[s][0] != tc.nodes[ls[0]].id {
			return false
		}
		l = tc.nodes[ls[0]]
		for _, n := range tc.nodes {
			if r := tc.host(n).Replica(s); r != nil {
				if id, _ := r.Leader(); id != string(l.id) {
					return false
				}
			}
		}
		_, err := gridtest.Dial(tc.t, l.addr).Get(redirectOnly(tc.t), &gridpb.GetRequest{Namespace: []byte("probe"), Key: keyOf(tc.t, s, "probe", 0)})
		return err == nil
	})
	return l
}

// follower returns a node that does not lead shard s.
func (tc *testCluster) follower(s int) *member {
	l := tc.leader(s)
	for _, n := range tc.nodes {
		if n != l {
			return n
		}
	}
	tc.t.Fatal("no follower")
	return nil
}

// redirectsTo reports whether got names shard s led by node l at the
// cluster's map epoch.
func (tc *testCluster) redirectsTo(got *gridpb.Redirect, s int, l *member) bool {
	return got != nil && got.Shard == uint32(s) && got.LeaderId == string(l.id) && got.LeaderAddr == l.addr && got.Epoch == tc.Map().Epoch
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
		d := digest.Record(ns, k, nil)
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
	return metadata.AppendToOutgoingContext(gridtest.Context(t), api.MetadataRedirect, "1")
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

func reserveOp(key []byte) *gridpb.Op {
	return &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: key, LeaseMs: 60000}}}
}

// getOp is a Get in the operator view (show_token), so that a test can tell
// which grant the read saw.
func getOp(key []byte, stale bool) *gridpb.Op {
	return &gridpb.Op{Op: &gridpb.Op_Get{Get: &gridpb.GetRequest{Namespace: []byte("ns"), Key: key, StaleOk: stale, ShowToken: true}}}
}

// sameRedirect reports whether got names shard s led by view node l at
// the test map's epoch.
func sameRedirect(got *gridpb.Redirect, s int, l *testNode) bool {
	return got != nil && got.Shard == uint32(s) && got.LeaderId == string(l.id) && got.LeaderAddr == l.addr && got.Epoch == testEpoch
}

// startViewNode serves a one-node host (every shard a one-voter group on an
// in-memory transport) in cluster mode with view: for the RPCs that need a
// cluster view but no replication.
func startViewNode(t *testing.T, view *testView, lis net.Listener) *testNode {
	t.Helper()
	n := startViewNodeOn(t, view, lis, nil)
	for s := range testShards {
		if _, err := n.host.StartReplica(s, true); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// startViewNodeOn serves a host in cluster mode with view, with no cluster
// runtime: the test starts the replicas it wants (over mux, when not nil)
// and changes their groups itself.
func startViewNodeOn(t *testing.T, view *testView, lis net.Listener, mux *raftlog.Mux) *testNode {
	t.Helper()
	host, err := shard.OpenHost(shard.HostConfig{NodeID: string(view.self), DataDir: t.TempDir(), Slots: testSlots, Shards: testShards,
		Mux: mux, TickInterval: time.Hour, NoSync: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{id: view.self, view: view, host: host, mux: mux, srv: api.NewServer(host, api.Options{Cluster: view}), addr: lis.Addr().String()}
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
