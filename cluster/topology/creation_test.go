package topology

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// The bootstrap map places every shard: min(replicas, nodes) replicas
// each, at the creation generation, spread as the planner spreads them.
func TestInitialSets(t *testing.T) {
	for _, tc := range []struct{ nodes, replicas int }{{1, 3}, {2, 1}, {3, 3}, {5, 3}} {
		ids := []NodeID{"a", "b", "c", "d", "e"}[:tc.nodes]
		w := newWorld(8, tc.replicas, ids...)
		m := InitialSets(w.m)
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		if len(Plan(m, w.alive, w.deadFor)) != 0 {
			t.Errorf("%d nodes: the planner still moves: %v", tc.nodes, Plan(m, w.alive, w.deadFor))
		}
		per := map[NodeID]int{}
		for s, set := range m.ShardReplicas {
			if len(set) != min(tc.replicas, tc.nodes) || !m.Created(s) {
				t.Fatalf("%d nodes: shard %d: %v, created %v", tc.nodes, s, set, m.Created(s))
			}
			for _, id := range set {
				per[id]++
			}
		}
		lo, hi := 1<<30, 0
		for _, id := range ids {
			lo, hi = min(lo, per[id]), max(hi, per[id])
		}
		if hi-lo > 1 {
			t.Errorf("%d nodes: replicas per node %v", tc.nodes, per)
		}
	}
}

// A replica added or removed moves a shard past its creation set; a
// leader-only move does not.
func TestGenerationCountsSetChanges(t *testing.T) {
	w := newWorld(2, 2, "a", "b", "c")
	m := InitialSets(w.m)
	m.Epoch = 1
	set := m.ShardReplicas[0]
	var spare NodeID = "c"
	for _, id := range []NodeID{"a", "b", "c"} {
		if len(set) == 2 && id != set[0] && id != set[1] {
			spare = id
		}
	}
	steps := []struct {
		mv      Move
		created bool
	}{
		{Move{Shard: 0, Leader: set[1]}, true},
		{Move{Shard: 0, Add: spare}, false},
		{Move{Shard: 0, Remove: spare}, false},
	}
	for _, st := range steps {
		next, err := Apply(m, Command{Type: CmdApplyMove, Move: st.mv})
		if err != nil {
			t.Fatal(err)
		}
		m = next
		if m.Created(0) != st.created || !m.Created(1) {
			t.Fatalf("after %v: created %v %v (generations %v)", st.mv, m.Created(0), m.Created(1), m.Generation)
		}
	}
	if m.Generation[0] != 2 {
		t.Fatalf("generation %d, want 2", m.Generation[0])
	}
}

// A removed node comes back only under a new incarnation; a node still in
// the cluster keeps the incarnation the map knows.
func TestJoinIncarnations(t *testing.T) {
	w := newWorld(2, 1, "a", "b")
	m := InitialSets(w.m)
	m.Epoch = 1
	for _, id := range []NodeID{"a", "b"} {
		n := m.Nodes[id]
		n.Incarnation = 7
		m.Nodes[id] = n
	}
	b := m.Nodes["b"]
	for _, tc := range []struct {
		name     string
		state    NodeState
		inc      uint64
		rejected bool
		want     NodeState
		wantInc  uint64
	}{
		{"removed, same incarnation", NodeRemoved, 7, true, 0, 0},
		{"removed, new incarnation", NodeRemoved, 8, false, NodeActive, 8},
		{"removed, from a log without incarnations", NodeRemoved, 0, false, NodeActive, 0},
		{"active, new incarnation", NodeActive, 8, true, 0, 0},
		{"draining, same incarnation", NodeDraining, 7, false, NodeDraining, 7},
		{"active, without incarnation", NodeActive, 0, false, NodeActive, 7},
	} {
		cur := m.Clone()
		info := b
		info.State = tc.state
		if tc.state == NodeRemoved {
			for s := range cur.ShardReplicas {
				cur.ShardReplicas[s] = []NodeID{"a"}
			}
			info.GRPCAddr, info.RaftAddr = "", ""
		}
		cur.Nodes["b"] = info
		join := b
		join.Incarnation, join.GRPCAddr = tc.inc, "b:9"
		next, err := Apply(cur, Command{Type: CmdNodeJoin, Node: join})
		if tc.rejected {
			if !errors.Is(err, ErrRejected) {
				t.Errorf("%s: %v, want rejected", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := next.Nodes["b"]; got.State != tc.want || got.Incarnation != tc.wantInc {
			t.Errorf("%s: %v incarnation %d, want %v %d", tc.name, got.State, got.Incarnation, tc.want, tc.wantInc)
		}
	}
}

// appendMapV1 is the version 1 encoding of a map (before incarnations and
// generations), as older binaries wrote it into snapshots and bootstrap
// commands.
func appendMapV1(buf []byte, m *Map) []byte {
	buf = append(buf, 1)
	for _, v := range []uint64{m.Epoch, uint64(m.Slots), uint64(m.Shards), uint64(m.Replicas)} {
		buf = binary.AppendUvarint(buf, v)
	}
	ids := m.sortedNodeIDs()
	index := map[NodeID]uint64{}
	buf = binary.AppendUvarint(buf, uint64(len(ids)))
	for i, id := range ids {
		index[id] = uint64(i)
		n := m.Nodes[id]
		for _, s := range []string{string(n.ID), n.GRPCAddr, n.RaftAddr, n.HTTPAddr} {
			buf = appendString(buf, s)
		}
		buf = append(buf, byte(n.State))
	}
	for _, rs := range m.ShardReplicas {
		buf = binary.AppendUvarint(buf, uint64(len(rs)))
		for _, id := range rs {
			buf = binary.AppendUvarint(buf, index[id])
		}
	}
	return append(buf, 0) // no leader hints
}

// Version 1 maps and commands still decode: no incarnations, and no shard
// at its creation set (their groups were created by a first replica).
func TestDecodeVersion1(t *testing.T) {
	w := newWorld(4, 3, "a", "b", "c")
	m := InitialSets(w.m)
	m.Epoch = 5
	got, err := DecodeMap(appendMapV1(nil, m))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.ShardReplicas, m.ShardReplicas) || got.Nodes["a"] != m.Nodes["a"] {
		t.Fatalf("v1 map: %+v", got)
	}
	for s := range got.Shards {
		if got.Created(s) {
			t.Fatalf("v1 map: shard %d at its creation set", s)
		}
	}
	boot, err := DecodeCommand(appendMapV1([]byte{1, byte(CmdBootstrap)}, m))
	if err != nil || boot.Map.Epoch != 5 {
		t.Fatalf("v1 bootstrap: %+v %v", boot, err)
	}
	d := testNode("d")
	v1 := []byte{1, byte(CmdNodeJoin)}
	for _, s := range []string{string(d.ID), d.GRPCAddr, d.RaftAddr, d.HTTPAddr} {
		v1 = appendString(v1, s)
	}
	join, err := DecodeCommand(append(v1, byte(d.State)))
	if err != nil || join.Node != d {
		t.Fatalf("v1 join: %+v %v", join.Node, err)
	}
	d.Incarnation = 1 << 40
	b, _ := Command{Type: CmdNodeJoin, Node: d}.MarshalBinary()
	if again, err := DecodeCommand(b); err != nil || again.Node != d {
		t.Fatalf("v2 join: %+v %v", again.Node, err)
	}

	meta := NodeMeta{ID: "n", GRPCAddr: "g", RaftAddr: "r", Incarnation: 99}
	mb, _ := meta.MarshalBinary()
	if back, err := DecodeNodeMeta(mb); err != nil || back != meta {
		t.Fatalf("meta: %+v %v", back, err)
	}
	old := []byte{1, 0}
	for _, s := range []string{"n", "g", "r", ""} {
		old = appendString(old, s)
	}
	if back, err := DecodeNodeMeta(old); err != nil || back != (NodeMeta{ID: "n", GRPCAddr: "g", RaftAddr: "r"}) {
		t.Fatalf("v1 meta: %+v %v", back, err)
	}
}
