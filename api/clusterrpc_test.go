package api_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/shard"
)

// TestStandaloneClusterRPCs: a standalone node describes itself as a
// one-node map leading every shard, has nothing to drain and no shard
// group to change, and its Status carries no cluster fields.
func TestStandaloneClusterRPCs(t *testing.T) {
	n := gridtest.Start(t, gridtest.Options{Shards: 4})
	c := gridtest.Dial(t, n.Addr())
	m, err := c.ClusterMap(gridtest.Context(t), &gridpb.ClusterMapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	self := n.Host().NodeID()
	if !m.Standalone || m.NodeId != self || m.Slots != shard.DefaultSlots || m.ShardCount != 4 || m.Replicas != 1 || m.Epoch != 0 ||
		len(m.Nodes) != 1 || m.Nodes[0].Id != self || m.Nodes[0].State != "active" || len(m.Shards) != 4 {
		t.Fatalf("standalone cluster map: %v", m)
	}
	for i, s := range m.Shards {
		if s.Id != uint32(i) || s.Leader != self || len(s.Replicas) != 1 || s.Replicas[0] != self {
			t.Errorf("shard %d: %v, want led and held by %s alone", i, s, self)
		}
	}
	_, err = c.Drain(gridtest.Context(t), &gridpb.DrainRequest{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "standalone node: nothing to drain") {
		t.Errorf("drain of a standalone node: %v", err)
	}
	_, err = c.ShardAdmin(gridtest.Context(t), &gridpb.ShardAdminRequest{Action: gridpb.ShardAdminAction_TRANSFER_LEADERSHIP})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("shard admin on a standalone node: %v", err)
	}
	st, err := c.Status(gridtest.Context(t), &gridpb.StatusRequest{})
	if err != nil || st.MapEpoch != 0 || st.ControlState != "" || st.ShardCount != 0 || len(st.Shards) != 4 {
		t.Errorf("standalone status: %v %v", st, err)
	}
}

// TestStartingNodeRefusesWithRedirect: a cluster node without a map (it
// is starting, or restarting and has not caught up) cannot route: its
// operations are UNAVAILABLE with a Redirect whose reason is "starting"
// and which names no leader (nothing was applied, another node can serve);
// its map is UNAVAILABLE, and its Status still answers.
func TestStartingNodeRefusesWithRedirect(t *testing.T) {
	view := &testView{self: "a", controlLeader: ""}
	n := startViewNode(t, view, listen(t))
	c := gridtest.Dial(t, n.addr)
	want := "node is starting and has no cluster map yet"
	starting := func(what string, err error) {
		t.Helper()
		rd := redirectDetail(err)
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), want) || rd == nil ||
			rd.Reason != gridpb.ReasonStarting || rd.LeaderAddr != "" {
			t.Errorf("%s: %v (redirect %v), want UNAVAILABLE %q with a Redirect, reason %q", what, err, rd, want, gridpb.ReasonStarting)
		}
	}
	_, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: []byte("k")})
	starting("reserve", err)
	_, err = c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{reserveOp([]byte("k"))}})
	starting("batch", err)
	_, err = c.ClusterMap(gridtest.Context(t), &gridpb.ClusterMapRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), want) {
		t.Errorf("cluster map: %v, want UNAVAILABLE %q", err, want)
	}
	st, err := c.Status(gridtest.Context(t), &gridpb.StatusRequest{})
	if err != nil || st.MapEpoch != 0 || st.ShardCount != testShards || st.ControlState != "Follower" {
		t.Errorf("status: %v %v", st, err)
	}
}

// TestRemovedNodeRefusesWithRedirect: a node whose map says it was removed
// serves no operation (reason "removed", no leader named), though it holds
// replicas by its own data. (A node holding no replica of a shard that
// does not forward says "not a member": TestShardAdminAndShardsNotHostedHere.)
func TestRemovedNodeRefusesWithRedirect(t *testing.T) {
	lisA, lisB := listen(t), listen(t)
	m := &topology.Map{Epoch: 9, Slots: testSlots, Shards: testShards, Replicas: 1, Nodes: map[topology.NodeID]topology.NodeInfo{
		"a": {ID: "a", GRPCAddr: lisA.Addr().String(), State: topology.NodeRemoved},
		"b": {ID: "b", GRPCAddr: lisB.Addr().String(), State: topology.NodeActive},
	}, ShardReplicas: [][]topology.NodeID{{"b"}, {"b"}}}
	a := startViewNode(t, &testView{self: "a", m: m.Clone(), controlLeader: "b"}, lisA)
	_, err := gridtest.Dial(t, a.addr).Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: []byte("k"), LeaseMs: 1000})
	rd := redirectDetail(err)
	if status.Code(err) != codes.Unavailable || rd == nil || rd.Reason != gridpb.ReasonRemoved || rd.LeaderAddr != "" ||
		rd.Epoch != 9 || !strings.Contains(err.Error(), "removed from the cluster") {
		t.Errorf("reserve on a removed node: %v (redirect %v), want UNAVAILABLE, reason %q", err, rd, gridpb.ReasonRemoved)
	}
}

// TestDrainForwardedToControlLeader: a drain sent to a node that does not
// lead the control group reaches the leader once, with "" resolved to the
// receiving node; the leader's refusals come back as they are.
func TestDrainForwardedToControlLeader(t *testing.T) {
	lisA, lisB, lisC := listen(t), listen(t), listen(t)
	lisC.Close() // node c's API is gone
	m := &topology.Map{Epoch: 3, Slots: testSlots, Shards: testShards, Replicas: 1, Nodes: map[topology.NodeID]topology.NodeInfo{},
		ShardReplicas: [][]topology.NodeID{{"a"}, {"b"}}}
	for id, lis := range map[topology.NodeID]string{"a": lisA.Addr().String(), "b": lisB.Addr().String(), "c": lisC.Addr().String()} {
		m.Nodes[id] = topology.NodeInfo{ID: id, GRPCAddr: lis, RaftAddr: "127.0.0.1:1", State: topology.NodeActive}
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var drained []topology.NodeID
	leader := &testView{self: "b", m: m.Clone(), controlLeader: "b",
		drain: func(_ context.Context, id topology.NodeID, force bool) (topology.DrainStatus, error) {
			if _, ok := m.Nodes[id]; !ok {
				return topology.DrainStatus{}, fmt.Errorf("%w: no node %q in the map", topology.ErrRejected, id)
			}
			mu.Lock()
			if force {
				id += "!" // forced: the forward carried force
			}
			drained = append(drained, id)
			mu.Unlock()
			return topology.DrainStatus{Node: id, State: topology.NodeDraining, ReplicasLeft: 1, Epoch: 4}, nil
		}}
	follower := &testView{self: "a", m: m.Clone(), controlLeader: "b"}
	startViewNode(t, leader, lisB)
	a := gridtest.Dial(t, startViewNode(t, follower, lisA).addr)

	resp, err := a.Drain(gridtest.Context(t), &gridpb.DrainRequest{})
	if err != nil || resp.NodeId != "a" || resp.State != "draining" || resp.ReplicasLeft != 1 || resp.Epoch != 4 {
		t.Fatalf("drain of self through a follower: %v %v", resp, err)
	}
	if resp, err := a.Drain(gridtest.Context(t), &gridpb.DrainRequest{NodeId: []byte("b"), Force: true}); err != nil || resp.NodeId != "b!" {
		t.Fatalf("forced drain of b through a follower: %v %v", resp, err)
	}
	mu.Lock()
	if fmt.Sprint(drained) != "[a b!]" {
		t.Errorf("the control leader drained %v, want [a b!] (b forced)", drained)
	}
	mu.Unlock()

	for _, tt := range []struct {
		name string
		ctx  context.Context
		id   string
		code codes.Code
		want string
	}{
		{"unknown node", gridtest.Context(t), "ghost", codes.NotFound, `unknown node "ghost"`},
		{"invalid node id", gridtest.Context(t), "bad id", codes.InvalidArgument, "invalid node id"},
		{"forwarded already", metadata.AppendToOutgoingContext(gridtest.Context(t), api.MetadataForwarded, "1"), "a", codes.Unavailable, `not the control group's leader (leader: "b")`},
	} {
		_, err := a.Drain(tt.ctx, &gridpb.DrainRequest{NodeId: []byte(tt.id)})
		if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %v naming %q", tt.name, err, tt.code, tt.want)
		}
	}

	follower.mu.Lock()
	follower.controlLeader = ""
	follower.mu.Unlock()
	if _, err := a.Drain(gridtest.Context(t), &gridpb.DrainRequest{}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not the control group's leader") {
		t.Errorf("drain with no known control leader: %v, want UNAVAILABLE", err)
	}
	follower.mu.Lock()
	follower.controlLeader = "c"
	follower.mu.Unlock()
	if _, err := a.Drain(gridtest.Context(t), &gridpb.DrainRequest{}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "outcome unknown") {
		t.Errorf("drain with the control leader's API gone: %v, want UNAVAILABLE, outcome unknown", err)
	}
}

// TestClusterMapAndStatus: a node's Status carries its map epoch, control
// state and shard count; its ClusterMap is its map (nodes sorted, gossip's
// view, state names) with each shard's leader as its replica knows it,
// not the map's preferred leader.
func TestClusterMapAndStatus(t *testing.T) {
	views := make([]*shownView, 3)
	tc := startCluster(t, gridtest.ClusterOptions{WrapView: func(i int, v api.ClusterView) api.ClusterView {
		views[i] = &shownView{ClusterView: v}
		return views[i]
	}})
	leaders := []*member{tc.leader(0), tc.leader(1)}
	ctl := tc.nodes[tc.WaitControlLeader(20*time.Second, -1)]
	f := tc.nodes[(ctl.i+1)%3]
	testwait.For(t, 20*time.Second, string(f.id)+" to be a control group voter", func() bool { return tc.Node(f.i).Cluster().ControlState() == "follower" })
	real := tc.Map()
	fc := gridtest.Dial(t, f.addr)
	st, err := fc.Status(gridtest.Context(t), &gridpb.StatusRequest{})
	if err != nil || st.MapEpoch != real.Epoch || st.ShardCount != testShards || st.ControlState != "follower" || len(st.Shards) != testShards ||
		st.NodeState != "active" {
		t.Fatalf("status: %v %v", st, err)
	}
	for _, sh := range st.Shards {
		if sh.Suffrage != "voter" || len(sh.Group) != 3 || !sh.ConfigCommitted || sh.ConfigIndex == 0 {
			t.Errorf("shard %d of a 3-voter group: %v", sh.Id, sh)
		}
	}

	// f's map: preferred leaders that are not the real ones, f itself
	// draining, and a node gossip does not see.
	want := real.Clone()
	for s, l := range leaders {
		for _, n := range tc.nodes {
			if n != l {
				want.ShardReplicas[s] = preferring(want.ShardReplicas[s], n.id)
				break
			}
		}
	}
	info := want.Nodes[f.id]
	info.State = topology.NodeDraining
	want.Nodes[f.id] = info
	gone := tc.nodes[(f.i+1)%3]
	alive := map[topology.NodeID]bool{}
	for _, n := range tc.nodes {
		alive[n.id] = n != gone
	}
	views[f.i].show(want, alive)

	got, err := fc.ClusterMap(gridtest.Context(t), &gridpb.ClusterMapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Standalone || got.Epoch != want.Epoch || got.Slots != testSlots || got.ShardCount != testShards || got.Replicas != 3 ||
		got.NodeId != string(f.id) || got.ControlLeader != string(ctl.id) || len(got.Nodes) != 3 || len(got.Shards) != testShards {
		t.Fatalf("cluster map: %v", got)
	}
	ids := slices.Sorted(maps.Keys(want.Nodes))
	for i, n := range got.Nodes {
		id := ids[i]
		state := "active"
		if id == f.id {
			state = "draining"
		}
		if n.Id != string(id) || n.GrpcAddr != want.Nodes[id].GRPCAddr || n.RaftAddr != want.Nodes[id].RaftAddr || n.State != state || n.Alive != alive[id] {
			t.Errorf("node %d: %v, want %s %s alive=%v", i, n, id, state, alive[id])
		}
	}
	for s, l := range leaders {
		sh := got.Shards[s]
		if sh.Id != uint32(s) || sh.Leader != string(l.id) || fmt.Sprint(sh.Replicas) != fmt.Sprint(want.ShardReplicas[s]) {
			t.Errorf("shard %d: %v, want leader %s (the replica's view, not the preferred %s) and replicas %v",
				s, sh, l.id, want.ShardReplicas[s][0], want.ShardReplicas[s])
		}
	}
}

// shownView is a node's cluster runtime as its API server sees it, with
// the map and gossip view a test shows it instead once shown.
type shownView struct {
	api.ClusterView

	mu    sync.Mutex
	m     *topology.Map
	alive map[topology.NodeID]bool
}

func (v *shownView) show(m *topology.Map, alive map[topology.NodeID]bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.m, v.alive = m.Clone(), maps.Clone(alive)
}

func (v *shownView) Map() *topology.Map {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		return v.ClusterView.Map()
	}
	return v.m.Clone()
}

func (v *shownView) Alive() map[topology.NodeID]bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.alive == nil {
		return v.ClusterView.Alive()
	}
	return maps.Clone(v.alive)
}

// preferring returns replica set rs with id as its preferred leader, the
// others sorted, as a map keeps it.
func preferring(rs []topology.NodeID, id topology.NodeID) []topology.NodeID {
	out := []topology.NodeID{id}
	for _, n := range rs {
		if n != id {
			out = append(out, n)
		}
	}
	slices.Sort(out[1:])
	return out
}

// TestShardAdminAndShardsNotHostedHere: three nodes serve a fixed map
// that gives shard 0 to n0 and n1 and shard 1 to n2 alone, with no cluster
// runtime: the test starts the replicas. ShardAdmin grows shard 0's
// group from n0 alone (add as non-voter, then promote) and hands its
// leadership to n1; a node that does not lead or does not hold the shard
// answers with a Redirect, and Peers turns that into ErrNotShardLeader.
// n2, which holds no replica of shard 0, forwards its operations by the
// map, and once leadership moved the node it forwards to redirects.
func TestShardAdminAndShardsNotHostedHere(t *testing.T) {
	nodes := startViewNodes(t, [][]int{{0, 1}, {2}})
	n0, n1, n2 := nodes[0], nodes[1], nodes[2]
	start := func(n *testNode, s int, bootstrap bool) {
		t.Helper()
		if _, err := n.host.StartReplica(s, bootstrap); err != nil {
			t.Fatal(err)
		}
	}
	start(n0, 0, true)
	start(n2, 1, true)
	if l := viewLeader(t, nodes, 0); l != n0 {
		t.Fatalf("shard 0 led by %s, want n0 (it bootstrapped alone)", l.id)
	}
	if l := viewLeader(t, nodes, 1); l != n2 {
		t.Fatalf("shard 1 led by %s, want n2 (it bootstrapped alone)", l.id)
	}
	c0, c1, c2 := gridtest.Dial(t, n0.addr), gridtest.Dial(t, n1.addr), gridtest.Dial(t, n2.addr)
	admin := func(c gridpb.GridClient, action gridpb.ShardAdminAction, n *testNode) (*gridpb.ShardAdminResponse, error) {
		return c.ShardAdmin(gridtest.Context(t), &gridpb.ShardAdminRequest{Shard: 0, Action: action, NodeId: []byte(n.id), RaftAddr: []byte(n.mux.Addr().String()),
			ControlTerm: testTerm, Epoch: testEpoch})
	}

	t.Run("bad input is INVALID_ARGUMENT", func(t *testing.T) {
		for _, tt := range []struct {
			req  *gridpb.ShardAdminRequest
			want string
		}{
			{&gridpb.ShardAdminRequest{Shard: 0}, "unknown action 0"},
			{&gridpb.ShardAdminRequest{Shard: 0, Action: 9}, "unknown action 9"},
			{&gridpb.ShardAdminRequest{Shard: 2, Action: gridpb.ShardAdminAction_TRANSFER_LEADERSHIP}, "shard 2 out of range 0..1"},
			{&gridpb.ShardAdminRequest{Shard: 0, Action: gridpb.ShardAdminAction_REMOVE_SERVER}, "REMOVE_SERVER needs a node id"},
			{&gridpb.ShardAdminRequest{Shard: 0, Action: gridpb.ShardAdminAction_ADD_VOTER, NodeId: []byte("n5")}, "needs its Raft address"},
			{&gridpb.ShardAdminRequest{Shard: 0, Action: gridpb.ShardAdminAction_ADD_NONVOTER, NodeId: []byte("bad id"), RaftAddr: []byte("x:1")}, "not in [A-Za-z0-9._-]"},
		} {
			_, err := c0.ShardAdmin(gridtest.Context(t), tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ShardAdmin(%v) = %v, want INVALID_ARGUMENT naming %q", tt.req, err, tt.want)
			}
		}
	})

	t.Run("a node not holding the shard redirects to the map's leader", func(t *testing.T) {
		_, err := admin(c2, gridpb.ShardAdminAction_ADD_NONVOTER, n1)
		if status.Code(err) != codes.Unavailable || !sameRedirect(redirectDetail(err), 0, n0) || !strings.Contains(err.Error(), "not hosted") {
			t.Errorf("shard admin on n2: %v (detail %v), want UNAVAILABLE, not hosted, Redirect to n0", err, redirectDetail(err))
		}
	})

	t.Run("the leader adds a non-voter, then promotes it", func(t *testing.T) {
		start(n1, 0, false)
		resp, err := admin(c0, gridpb.ShardAdminAction_ADD_NONVOTER, n1)
		if err != nil || resp.CommitIndex == 0 {
			t.Fatalf("add non-voter n1: %v %v", resp, err)
		}
		testwait.For(t, 20*time.Second, "n1 to catch up", func() bool { return n1.host.Replica(0).Status().AppliedIndex >= resp.CommitIndex })
		if resp, err = admin(c0, gridpb.ShardAdminAction_ADD_VOTER, n1); err != nil || resp.CommitIndex == 0 {
			t.Fatalf("add voter n1: %v %v", resp, err)
		}
		if viewLeader(t, nodes, 0) != n0 {
			t.Fatal("n0 lost the lead")
		}
		_, err = admin(c1, gridpb.ShardAdminAction_REMOVE_SERVER, n0)
		if status.Code(err) != codes.Unavailable || !sameRedirect(redirectDetail(err), 0, n0) {
			t.Errorf("shard admin on the follower n1: %v, want a Redirect to n0", err)
		}
	})

	t.Run("a stale or missing fence is refused and changes nothing", func(t *testing.T) {
		p := api.NewPeers()
		defer p.Close()
		before, err := n0.host.Replica(0).Configuration()
		if err != nil {
			t.Fatal(err)
		}
		add := topology.AdminRequest{Shard: 0, Action: topology.AdminAddNonvoter, Node: n2.id, RaftAddr: n2.mux.Addr().String()}
		for _, f := range []topology.Fence{{ControlTerm: testTerm - 1, Epoch: testEpoch}, {}} {
			add.Fence = f
			_, err := p.ShardAdmin(gridtest.Context(t), n0.addr, add)
			if !errors.Is(err, topology.ErrStaleFence) || errors.Is(err, topology.ErrNotShardLeader) {
				t.Errorf("add n2 to shard 0 under %+v (n0 knows term %d): %v, want ErrStaleFence", f, testTerm, err)
			}
			_, err = c0.ShardAdmin(gridtest.Context(t), &gridpb.ShardAdminRequest{Shard: 0, Action: gridpb.ShardAdminAction_TRANSFER_LEADERSHIP,
				NodeId: []byte(n1.id), RaftAddr: []byte(n1.mux.Addr().String()), ControlTerm: f.ControlTerm, Epoch: f.Epoch})
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "control term") {
				t.Errorf("transfer under %+v: %v, want FAILED_PRECONDITION naming the control term", f, err)
			}
		}
		if l := viewLeader(t, nodes, 0); l != n0 {
			t.Fatalf("shard 0 led by %s after refused transfers, want n0", l.id)
		}
		after, err := n0.host.Replica(0).Configuration()
		if err != nil || !slices.Equal(after, before) {
			t.Fatalf("configuration after refused changes: %v %v, want %v", after, err, before)
		}
		// A later term than the receiver knows is not stale: the receiver
		// has not heard of the new term yet.
		rm := topology.AdminRequest{Shard: 0, Action: topology.AdminRemoveServer, Node: "n9", Fence: topology.Fence{ControlTerm: testTerm + 1}}
		if _, err := p.ShardAdmin(gridtest.Context(t), n0.addr, rm); err != nil {
			t.Errorf("remove a non-member under a later term: %v", err)
		}
	})

	t.Run("operations on a shard not hosted here are forwarded or redirected", func(t *testing.T) {
		k0, k1 := keyOf(t, 0, "away", 0), keyOf(t, 1, "away", 0)
		resp, err := c2.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{reserveOp(k0), reserveOp(k1), getOp(k0, true)}})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Results
		if r[0].Outcome != gridpb.Outcome_ACQUIRED || r[1].Outcome != gridpb.Outcome_ACQUIRED || r[2].State != gridpb.State_PROCESSING || r[2].Token != r[0].Token {
			t.Fatalf("batch on n2 (shard 0 forwarded to n0, shard 1 here, a stale read of shard 0 forwarded too): %v", r)
		}
		// n1 follows shard 0 and holds no replica of shard 1: both groups
		// go away, to two nodes, in parallel.
		m0, m1 := keyOf(t, 0, "mixed", 0), keyOf(t, 1, "mixed", 0)
		resp, err = c1.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{reserveOp(m0), reserveOp(m1), getOp(m0, false), getOp(m1, false)}})
		if err != nil {
			t.Fatal(err)
		}
		r = resp.Results
		if r[0].Outcome != gridpb.Outcome_ACQUIRED || r[1].Outcome != gridpb.Outcome_ACQUIRED || r[2].Token != r[0].Token || r[3].Token != r[1].Token {
			t.Fatalf("batch on n1 (shard 0 refused by its replica here, shard 1 not hosted): %v", r)
		}
		resp, err = c2.Batch(redirectOnly(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{reserveOp(keyOf(t, 0, "away", 1)), getOp(k0, true)}})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range resp.Results {
			if r.Error == nil || !sameRedirect(r.Error.Redirect, 0, n0) || !strings.Contains(r.Error.Message, "not hosted") ||
				r.Error.Redirect.Reason != gridpb.ReasonNotMember {
				t.Errorf("op %d with grid-redirect on n2: %v, want a Redirect to n0 saying shard 0 is not hosted there (reason %q)", i, r, gridpb.ReasonNotMember)
			}
		}
	})

	t.Run("after a transfer, a stale map's forward comes back as the new leader's Redirect", func(t *testing.T) {
		if _, err := admin(c0, gridpb.ShardAdminAction_TRANSFER_LEADERSHIP, n1); err != nil {
			t.Fatalf("transfer to n1: %v", err)
		}
		if l := viewLeader(t, nodes, 0); l != n1 {
			t.Fatalf("shard 0 led by %s after the transfer, want n1", l.id)
		}
		// n2's map still prefers n0, which no longer leads and does not
		// forward a forwarded request again: it names n1.
		_, err := c2.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: keyOf(t, 0, "moved", 0)})
		if status.Code(err) != codes.Unavailable || !sameRedirect(redirectDetail(err), 0, n1) {
			t.Errorf("reserve on n2 after the transfer: %v (detail %v), want a Redirect to n1", err, redirectDetail(err))
		}
		if res, err := c1.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: keyOf(t, 0, "moved", 0)}); err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
			t.Errorf("reserve on the new leader: %v %v", res, err)
		}
	})

	t.Run("peers: shard status and shard admin", func(t *testing.T) {
		p := api.NewPeers()
		defer p.Close()
		fence := topology.Fence{ControlTerm: testTerm, Epoch: testEpoch}
		st, ok, err := p.ShardStatus(gridtest.Context(t), n0.addr, 0)
		if err != nil || !ok || st.RaftState != "Follower" || st.Leader != n1.id || st.Commit == 0 {
			t.Errorf("ShardStatus of n0's replica of shard 0: %+v %v %v", st, ok, err)
		}
		both := []topology.GroupMember{{ID: n0.id, Voter: true}, {ID: n1.id, Voter: true}}
		if !slices.Equal(st.Group, both) || !st.ConfigCommitted || st.ConfigIndex == 0 || st.ConfigIndex > st.Commit ||
			st.LastContact < 0 || st.Role(n0.id) != "voter" || st.Role(n2.id) != "none" {
			t.Errorf("n0's view of shard 0's group: %+v, want %v committed, a last contact", st, both)
		}
		lst, _, err := p.ShardStatus(gridtest.Context(t), n1.addr, 0)
		if err != nil || lst.LastContact != 0 || !slices.Equal(lst.Group, both) || lst.ConfigIndex != st.ConfigIndex {
			t.Errorf("the leader n1's view of shard 0's group: %+v %v, want %v at index %d, last contact 0", lst, err, both, st.ConfigIndex)
		}
		if _, ok, err := p.ShardStatus(gridtest.Context(t), n2.addr, 0); ok || err != nil {
			t.Errorf("ShardStatus of a shard n2 does not hold: ok=%v %v", ok, err)
		}
		_, err = p.ShardAdmin(gridtest.Context(t), n0.addr, topology.AdminRequest{Shard: 0, Action: topology.AdminRemoveServer, Node: n0.id, Fence: fence})
		if !errors.Is(err, topology.ErrNotShardLeader) {
			t.Errorf("ShardAdmin on a follower: %v, want ErrNotShardLeader", err)
		}
		commit, err := p.ShardAdmin(gridtest.Context(t), n1.addr, topology.AdminRequest{Shard: 0, Action: topology.AdminRemoveServer, Node: n0.id, Fence: fence})
		if err != nil || commit == 0 {
			t.Fatalf("remove n0 through the leader: %d %v", commit, err)
		}
		lst, _, err = p.ShardStatus(gridtest.Context(t), n1.addr, 0)
		if err != nil || !slices.Equal(lst.Group, both[1:]) || !lst.ConfigCommitted || lst.ConfigIndex <= st.ConfigIndex || lst.Role(n0.id) != "none" {
			t.Errorf("the leader's view after removing n0: %+v %v", lst, err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if _, _, err := p.ShardStatus(gridtest.Context(t), n1.addr, 0); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("ShardStatus after Close: %v", err)
		}
	})
}

// startViewNodes starts len(sets) nodes, n0, n1, ..., each with its Raft
// mux on loopback, serving views of one map at testEpoch in which sets[s]
// lists the indexes of the nodes holding shard s, preferred leader first,
// with n0 leading the control group at testTerm and every node alive. No
// node runs a replica yet.
func startViewNodes(t *testing.T, sets [][]int) []*testNode {
	t.Helper()
	n := 0
	for _, set := range sets {
		n = max(n, slices.Max(set)+1)
	}
	m := &topology.Map{Epoch: testEpoch, Slots: testSlots, Shards: testShards, Replicas: n, Nodes: map[topology.NodeID]topology.NodeInfo{}}
	ids := make([]topology.NodeID, n)
	muxes := make([]*raftlog.Mux, n)
	lis := make([]net.Listener, n)
	for i := range n {
		ids[i] = topology.NodeID(fmt.Sprint("n", i))
		mux, err := raftlog.ListenMux("127.0.0.1:0", raftlog.MuxConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mux.Close() }) // after the host's, registered later
		muxes[i], lis[i] = mux, listen(t)
		m.Nodes[ids[i]] = topology.NodeInfo{ID: ids[i], GRPCAddr: lis[i].Addr().String(), RaftAddr: mux.Addr().String(), State: topology.NodeActive}
	}
	for _, set := range sets {
		rs := []topology.NodeID{}
		for _, i := range set {
			rs = append(rs, ids[i])
		}
		m.ShardReplicas = append(m.ShardReplicas, rs)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	var nodes []*testNode
	for i := range n {
		view := &testView{self: ids[i], m: m.Clone(), alive: map[topology.NodeID]bool{}, controlLeader: ids[0], controlTerm: testTerm}
		for _, id := range ids {
			view.alive[id] = true
		}
		nodes = append(nodes, startViewNodeOn(t, view, lis[i], muxes[i]))
	}
	return nodes
}
