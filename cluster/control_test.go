package cluster

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/l4xg/grid/cluster/topology"
)

// bootstrapMap is a map of 4 shards on nodes a, b and c, as a cluster
// creates it.
func bootstrapMap() *topology.Map {
	m := &topology.Map{Slots: 16, Shards: 4, Replicas: 3, Nodes: map[topology.NodeID]topology.NodeInfo{}, ShardReplicas: make([][]topology.NodeID, 4)}
	for _, id := range []topology.NodeID{"a", "b", "c"} {
		m.Nodes[id] = controlTestNode(id)
	}
	return topology.InitialSets(m)
}

func controlTestNode(id topology.NodeID) topology.NodeInfo {
	return topology.NodeInfo{ID: id, GRPCAddr: string(id) + ":7420", RaftAddr: string(id) + ":7421", State: topology.NodeActive}
}

// step is one command and what must come of it.
type step struct {
	cmd       topology.Command
	rejected  bool
	wantEpoch uint64
}

func controlScript() []step {
	d := controlTestNode("d")
	d2 := d
	d2.GRPCAddr = "d:9999"
	return []step{
		{cmd: topology.Command{Type: topology.CmdNodeJoin, Node: d}, rejected: true}, // before bootstrap
		{cmd: topology.Command{Type: topology.CmdBootstrap, Map: bootstrapMap()}, wantEpoch: 1},
		{cmd: topology.Command{Type: topology.CmdBootstrap, Map: bootstrapMap()}, rejected: true, wantEpoch: 1},
		{cmd: topology.Command{Type: topology.CmdNodeJoin, Node: d}, wantEpoch: 2},
		{cmd: topology.Command{Type: topology.CmdNodeJoin, Node: d}, wantEpoch: 2}, // no-op
		{cmd: topology.Command{Type: topology.CmdNodeJoin, Node: d2}, wantEpoch: 3},
		{cmd: topology.Command{Type: topology.CmdNodeJoin, Node: topology.NodeInfo{ID: "bad id", GRPCAddr: "x", RaftAddr: "y"}}, rejected: true, wantEpoch: 3},
		{cmd: topology.Command{Type: topology.CmdApplyMove, Move: topology.Move{Shard: 0, Add: "d"}}, wantEpoch: 4},
		{cmd: topology.Command{Type: topology.CmdApplyMove, Move: topology.Move{Shard: 0, Add: "d"}}, rejected: true, wantEpoch: 4},
		{cmd: topology.Command{Type: topology.CmdApplyMove, Move: topology.Move{Shard: 0, Remove: "a", Leader: "d"}}, wantEpoch: 5},
		{cmd: topology.Command{Type: topology.CmdSetLeaderHint, Shard: 0, ID: "d"}, wantEpoch: 6},
		{cmd: topology.Command{Type: topology.CmdSetLeaderHint, Shard: 0, ID: "a"}, rejected: true, wantEpoch: 6},
		{cmd: topology.Command{Type: topology.CmdNodeDrain, ID: "c"}, wantEpoch: 7},
		{cmd: topology.Command{Type: topology.CmdNodeRemove, ID: "c"}, rejected: true, wantEpoch: 7}, // still holds replicas
		{cmd: topology.Command{Type: topology.CmdNodeDrain, ID: "zz"}, rejected: true, wantEpoch: 7},
	}
}

func runScript(t *testing.T, apply func(topology.Command) ApplyResult) {
	t.Helper()
	for i, s := range controlScript() {
		res := apply(s.cmd)
		if s.rejected != errors.Is(res.Err, topology.ErrRejected) || !s.rejected && res.Err != nil {
			t.Fatalf("step %d %v: err %v, want rejected=%v", i, s.cmd.Type, res.Err, s.rejected)
		}
		if res.Epoch != s.wantEpoch {
			t.Fatalf("step %d %v: epoch %d, want %d", i, s.cmd.Type, res.Epoch, s.wantEpoch)
		}
	}
}

func TestControlApply(t *testing.T) {
	c := NewControl()
	changed := c.Changed()
	runScript(t, func(cmd topology.Command) ApplyResult {
		b, err := cmd.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return c.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b}).(ApplyResult)
	})
	select {
	case <-changed:
	default:
		t.Fatal("Changed not signalled")
	}
	m := c.Map()
	if rs := m.ShardReplicas[0]; rs[0] != "d" || len(rs) != 3 || m.Leaders[0] != "d" {
		t.Fatalf("shard 0: %v, hint %v", rs, m.Leaders)
	}
	if m.Nodes["c"].State != topology.NodeDraining || m.Nodes["d"].GRPCAddr != "d:9999" {
		t.Fatalf("nodes %+v", m.Nodes)
	}
	m.Nodes["a"] = topology.NodeInfo{}
	if c.Map().Nodes["a"].ID != "a" {
		t.Fatal("Map returned shared state")
	}
}

func TestControlPanicsOnUnknownCommand(t *testing.T) {
	drain, err := topology.Command{Type: topology.CmdNodeDrain, ID: "a"}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	commandVersion := drain[0] // the encoding's version byte comes first
	for name, data := range map[string][]byte{
		"unknown type": {commandVersion, 200},
		"newer format": {commandVersion + 1, byte(topology.CmdNodeDrain), 1, 'a'},
		"truncated":    {commandVersion, byte(topology.CmdApplyMove)},
	} {
		func() {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.Contains(msg, "control entry 7") || !strings.Contains(msg, "newer binary") {
					t.Errorf("%s: panic %q, want a clear message", name, msg)
				}
			}()
			NewControl().Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: data})
		}()
	}
}

// raftNode is a single-voter control group on in-memory stores.
type raftNode struct {
	r     *raft.Raft
	fsm   *Control
	store *raft.InmemStore
	snaps *raft.InmemSnapshotStore
}

func startRaft(t *testing.T, store *raft.InmemStore, snaps *raft.InmemSnapshotStore, bootstrap bool) *raftNode {
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = "ctl-1"
	conf.HeartbeatTimeout, conf.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
	conf.LeaderLeaseTimeout, conf.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
	conf.SnapshotThreshold = 1 << 20 // snapshots only when asked
	conf.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	addr, trans := raft.NewInmemTransport("ctl-1")
	if bootstrap {
		cfg := raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: addr}}}
		if err := raft.BootstrapCluster(conf, store, store, snaps, trans, cfg); err != nil {
			t.Fatal(err)
		}
	}
	n := &raftNode{fsm: NewControl(), store: store, snaps: snaps}
	r, err := raft.NewRaft(conf, n.fsm, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	n.r = r
	deadline := time.Now().Add(5 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("no leader within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

func (n *raftNode) propose(t *testing.T, cmd topology.Command) ApplyResult {
	t.Helper()
	b, err := cmd.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f := n.r.Apply(b, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	return f.Response().(ApplyResult)
}

func (n *raftNode) stop(t *testing.T) {
	t.Helper()
	if err := n.r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
}

func TestControlThroughRaft(t *testing.T) {
	store, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	n := startRaft(t, store, snaps, true)
	script := controlScript()
	half := 8
	runScript(t, func(cmd topology.Command) ApplyResult {
		half--
		if half == 0 {
			// Snapshot midway: the restart below restores it, then
			// replays the rest of the log on top.
			if err := n.r.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
		return n.propose(t, cmd)
	})
	want := n.fsm.Map()
	if want.Epoch != script[len(script)-1].wantEpoch {
		t.Fatalf("epoch %d", want.Epoch)
	}

	// The snapshot alone restores into a fresh FSM.
	if err := n.r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("snapshots: %v, %v", metas, err)
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	fresh := NewControl()
	if err := fresh.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if got := fresh.Map(); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored map:\n got %+v\nwant %+v", got, want)
	}
	n.stop(t)

	// A restart on the same stores comes back to the same map.
	n = startRaft(t, store, snaps, false)
	defer n.stop(t)
	if got := n.fsm.Map(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after restart:\n got %+v\nwant %+v", got, want)
	}
	if res := n.propose(t, topology.Command{Type: topology.CmdNodeRemove, ID: "zz"}); !errors.Is(res.Err, topology.ErrRejected) {
		t.Fatalf("after restart: %v", res.Err)
	}
}

func TestControlRestoreKeepsStateOnBadSnapshot(t *testing.T) {
	c := NewControl()
	b, _ := topology.Command{Type: topology.CmdBootstrap, Map: bootstrapMap()}.MarshalBinary()
	c.Apply(&raft.Log{Type: raft.LogCommand, Data: b})
	before := c.Map()
	good := topology.EncodeSnapshot(before)
	if err := c.Restore(io.NopCloser(strings.NewReader(string(good[:len(good)-3])))); !errors.Is(err, topology.ErrCorrupt) {
		t.Fatalf("truncated snapshot: %v", err)
	}
	if !reflect.DeepEqual(c.Map(), before) {
		t.Fatal("a failed restore changed the state")
	}
	if err := c.Restore(io.NopCloser(strings.NewReader(string(topology.EncodeSnapshot(nil))))); err != nil || c.Map() != nil {
		t.Fatalf("empty snapshot: %v, %v", err, c.Map())
	}
}

// TestRemovedNodeIsNeverReady: the replica loop's verdict can come from a
// map an entry replaced while the round ran (seen: a round computed ready
// from the epoch before the node's removal and stored it after), so Ready
// checks removal against the map in force.
func TestRemovedNodeIsNeverReady(t *testing.T) {
	m := bootstrapMap()
	m.Nodes["x"] = topology.NodeInfo{ID: "x", GRPCAddr: "x:7420", RaftAddr: "x:7421", State: topology.NodeRemoved}
	b, err := topology.Command{Type: topology.CmdBootstrap, Map: m}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	n := &Runtime{cfg: Config{ID: "x"}, ctl: NewControl()}
	if res := n.ctl.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b}).(ApplyResult); res.Err != nil {
		t.Fatal(res.Err)
	}
	n.setReady("") // a verdict computed from an earlier map
	if n.Ready() {
		t.Fatal("a node its current map lists as removed says it is ready")
	}
	if ok, why := n.Readiness(); ok || !strings.Contains(why, "removed") {
		t.Fatalf("Readiness = %v %q, want not ready, removed", ok, why)
	}
}

// A founding node without --shards gives the new cluster as few shards as
// give every founding node a replica.
func TestInitialShards(t *testing.T) {
	for _, c := range []struct {
		nodes, replicas int
		slots           uint32
		want            int
	}{
		{1, 1, 4096, 1},
		{2, 3, 4096, 1},
		{3, 3, 4096, 1},
		{4, 3, 4096, 2},
		{6, 3, 4096, 2},
		{7, 3, 4096, 3},
		{9, 3, 4096, 3},
		{3, 1, 4096, 3},
		{5, 2, 4096, 3},
		{9, 1, 4, 4},    // never more shards than slots
		{3, 0, 4096, 3}, // a replica count not yet defaulted counts as 1
		{0, 3, 4096, 1}, // never none
	} {
		if got := initialShards(c.nodes, c.replicas, c.slots); got != c.want {
			t.Errorf("initialShards(%d nodes, %d replicas, %d slots) = %d, want %d", c.nodes, c.replicas, c.slots, got, c.want)
		}
	}
}
