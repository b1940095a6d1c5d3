package topology

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// fataler is what the helpers need from *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// world is a test cluster as the control leader sees it: the map plus the
// gossip view.
type world struct {
	m     *Map
	alive map[NodeID]bool
	dead  map[NodeID]bool // dead past the grace period
}

func (w *world) deadFor(id NodeID) bool { return w.dead[id] }

func testNode(id NodeID) NodeInfo {
	return NodeInfo{ID: id, GRPCAddr: string(id) + ":7420", RaftAddr: string(id) + ":7421", State: NodeActive}
}

func newWorld(shards, replicas int, ids ...NodeID) *world {
	w := &world{
		m:     &Map{Slots: uint32(shards * 4), Shards: shards, Replicas: replicas, Nodes: map[NodeID]NodeInfo{}, ShardReplicas: make([][]NodeID, shards)},
		alive: map[NodeID]bool{},
		dead:  map[NodeID]bool{},
	}
	for _, id := range ids {
		w.m.Nodes[id] = testNode(id)
		w.alive[id] = true
	}
	return w
}

// liveReplicas counts the replicas of shard s that serve.
func (w *world) liveReplicas(s int) int {
	n := 0
	for _, id := range w.m.ShardReplicas[s] {
		st := w.m.Nodes[id].State
		if w.alive[id] && !w.dead[id] && (st == NodeActive || st == NodeDraining) {
			n++
		}
	}
	return n
}

// target is min(R, active nodes not dead past grace), computed here
// independently of the planner.
func (w *world) target() int {
	n := 0
	for id, info := range w.m.Nodes {
		if info.State == NodeActive && !w.dead[id] {
			n++
		}
	}
	return min(n, w.m.Replicas)
}

// eligible lists the nodes that may hold and lead replicas.
func (w *world) eligible() []NodeID {
	var out []NodeID
	for id, info := range w.m.Nodes {
		if info.State == NodeActive && w.alive[id] && !w.dead[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// step applies one half-move and checks the map stays valid.
func (w *world) step(t fataler, mv Move) {
	t.Helper()
	if err := w.m.ApplyMove(mv); err != nil {
		t.Fatalf("apply %v: %v\nmap %+v", mv, err, w.m.ShardReplicas)
	}
	if err := w.m.Validate(); err != nil {
		t.Fatalf("after %v: %v", mv, err)
	}
}

// execute runs a move the way the control leader does, add before remove,
// and checks that after each half the shard serves at least
// min(what it served before the move, target) replicas.
func (w *world) execute(t fataler, mv Move) {
	t.Helper()
	floor := min(w.liveReplicas(mv.Shard), w.target())
	halves := []Move{mv}
	if mv.Add != "" && mv.Remove != "" {
		halves = []Move{{Shard: mv.Shard, Add: mv.Add}, {Shard: mv.Shard, Remove: mv.Remove, Leader: mv.Leader}}
	}
	for _, h := range halves {
		w.step(t, h)
		if got := w.liveReplicas(mv.Shard); got < floor {
			t.Fatalf("after %v of %v: shard %d serves %d replicas, below %d", h, mv, mv.Shard, got, floor)
		}
	}
}

// converge plans and executes until the plan is empty; a full plan must
// leave nothing for the next call.
func (w *world) converge(t fataler) {
	t.Helper()
	for round := 0; ; round++ {
		plan := Plan(w.m, w.alive, w.deadFor)
		if again := Plan(w.m, w.alive, w.deadFor); !slices.Equal(plan, again) {
			t.Fatalf("plan not deterministic:\n%v\n%v", plan, again)
		}
		if len(plan) == 0 {
			return
		}
		if round == 1 {
			t.Fatalf("plan not complete in one round, second plan: %v\nmap %v", plan, w.m.ShardReplicas)
		}
		for _, mv := range plan {
			w.execute(t, mv)
		}
	}
}

// checkSteady checks the placement invariants once the plan is empty.
func (w *world) checkSteady(t fataler) {
	t.Helper()
	relaxed := w.relaxed()
	el := w.eligible()
	load, leads := map[NodeID]int{}, map[NodeID]int{}
	for s, rs := range w.m.ShardReplicas {
		for i, id := range rs {
			load[id]++
			if i == 0 {
				leads[id]++
			}
		}
		if relaxed {
			continue // nodes within the grace period keep what they hold
		}
		if len(rs) != w.target() {
			t.Fatalf("shard %d has %d replicas %v, want %d", s, len(rs), rs, w.target())
		}
		for _, id := range rs {
			if !slices.Contains(el, id) {
				t.Fatalf("shard %d keeps a replica on %q (%v, alive %v, dead %v)", s, id, w.m.Nodes[id].State, w.alive[id], w.dead[id])
			}
		}
	}
	if relaxed || len(el) == 0 {
		return
	}
	if spread(el, load) > 1 {
		t.Fatalf("replica counts %v over %v differ by more than one", load, el)
	}
	if spread(el, leads) > 1 {
		t.Fatalf("preferred leader counts %v over %v differ by more than one\nmap %v", leads, el, w.m.ShardReplicas)
	}
}

// relaxed reports whether only convergence can be checked, not balance:
// shards whose group has lost its majority are stuck until nodes come
// back, a shard keeps its last replica even when nothing may hold it, and
// nodes within the grace period keep what they hold.
func (w *world) relaxed() bool {
	if w.anyInGrace() || w.target() == 0 {
		return true
	}
	for s, rs := range w.m.ShardReplicas {
		if len(rs) > 0 && 2*w.liveReplicas(s) <= len(rs) {
			return true
		}
	}
	return false
}

func spread(ids []NodeID, count map[NodeID]int) int {
	lo, hi := count[ids[0]], count[ids[0]]
	for _, id := range ids {
		lo, hi = min(lo, count[id]), max(hi, count[id])
	}
	return hi - lo
}

func TestPlanBootstrapAndJoin(t *testing.T) {
	w := newWorld(8, 3, "a", "b", "c")
	w.converge(t)
	w.checkSteady(t)
	for s, rs := range w.m.ShardReplicas {
		if len(rs) != 3 {
			t.Fatalf("shard %d: %v", s, rs)
		}
	}
	w.m.Nodes["d"] = testNode("d")
	w.alive["d"] = true
	plan := Plan(w.m, w.alive, w.deadFor)
	// 24 replicas over 4 nodes: d takes 6, each move brings exactly one.
	if len(plan) < 6 {
		t.Fatalf("join plan %v: want at least 6 moves", plan)
	}
	for _, mv := range plan[:6] {
		if mv.Add != "d" || mv.Remove == "" {
			t.Fatalf("join plan %v: first moves must bring replicas to d", plan)
		}
	}
	w.converge(t)
	w.checkSteady(t)
}

func TestPlanDrainAndDeath(t *testing.T) {
	w := newWorld(6, 3, "a", "b", "c", "d")
	w.converge(t)
	// d stops answering: within the grace period nothing moves.
	w.alive["d"] = false
	for _, mv := range Plan(w.m, w.alive, w.deadFor) {
		if mv.Add != "" || mv.Remove != "" {
			t.Fatalf("move %v on suspicion alone", mv)
		}
	}
	w.converge(t)
	w.dead["d"] = true
	w.converge(t)
	w.checkSteady(t)
	// drain c: every shard ends on a and b only.
	c := w.m.Nodes["c"]
	c.State = NodeDraining
	w.m.Nodes["c"] = c
	w.converge(t)
	w.checkSteady(t)
	for s, rs := range w.m.ShardReplicas {
		if !slices.Equal(sortedCopy(rs), []NodeID{"a", "b"}) {
			t.Fatalf("shard %d on %v after drain", s, rs)
		}
	}
}

func sortedCopy(ids []NodeID) []NodeID {
	c := slices.Clone(ids)
	slices.Sort(c)
	return c
}

// TestPlanProperties drives random clusters through joins, deaths,
// recoveries and drains; after every event the plan is executed half-move
// by half-move and must converge to the steady-state invariants.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		shards := rapid.IntRange(1, 16).Draw(rt, "shards")
		replicas := rapid.IntRange(1, 4).Draw(rt, "replicas")
		n := rapid.IntRange(1, 7).Draw(rt, "nodes")
		var ids []NodeID
		for i := 0; i < n; i++ {
			ids = append(ids, NodeID(fmt.Sprintf("n%02d", i)))
		}
		w := newWorld(shards, replicas, ids...)
		scramble(rt, w)
		w.converge(rt)
		w.checkSteady(rt)
		next := n
		for i, steps := 0, rapid.IntRange(0, 8).Draw(rt, "events"); i < steps; i++ {
			steady := !w.relaxed()
			kind, id := event(rt, w, &next)
			checkMinimal(rt, w, steady, kind, id)
			w.converge(rt)
			w.checkSteady(rt)
		}
	})
}

// scramble starts from an arbitrary valid placement instead of an empty one.
func scramble(rt *rapid.T, w *world) {
	if !rapid.Bool().Draw(rt, "scramble") {
		return
	}
	ids := w.m.sortedNodeIDs()
	for s := range w.m.ShardReplicas {
		k := rapid.IntRange(0, min(len(ids), w.m.Replicas+1)).Draw(rt, "k")
		perm := rapid.Permutation(ids).Draw(rt, "perm")
		set := perm[:k]
		if k > 1 {
			slices.Sort(set[1:])
		}
		w.m.ShardReplicas[s] = slices.Clip(set)
		if k == 0 {
			w.m.ShardReplicas[s] = nil
		}
	}
	if err := w.m.Validate(); err != nil {
		rt.Fatalf("scrambled map: %v", err)
	}
}

// checkMinimal checks that a plan moves only replicas that must move: from
// a steady state, a node joining only receives, and a node falling silent
// within the grace period moves nothing (only preferred leaders change).
func checkMinimal(rt *rapid.T, w *world, steady bool, kind int, id NodeID) {
	if !steady || kind != eventJoin && kind != eventSilent {
		return
	}
	for _, mv := range Plan(w.m, w.alive, w.deadFor) {
		if kind == eventSilent && (mv.Add != "" || mv.Remove != "") {
			rt.Fatalf("%q fell silent within grace, yet the plan moves a replica: %v", id, mv)
		}
		if kind == eventJoin && mv.Add != "" && mv.Add != id {
			rt.Fatalf("%q joined, yet the plan adds elsewhere: %v", id, mv)
		}
	}
}

func (w *world) anyInGrace() bool {
	for id, info := range w.m.Nodes {
		if info.State == NodeActive && !w.alive[id] && !w.dead[id] {
			return true
		}
	}
	return false
}

const (
	eventJoin = iota
	eventSilent
	eventDead
	eventBack
	eventDrain
	eventRemove
)

func event(rt *rapid.T, w *world, next *int) (int, NodeID) {
	ids := w.m.sortedNodeIDs()
	id := rapid.SampledFrom(ids).Draw(rt, "node")
	info := w.m.Nodes[id]
	kind := rapid.IntRange(eventJoin, eventRemove).Draw(rt, "event")
	switch kind {
	case eventJoin:
		id = NodeID(fmt.Sprintf("n%02d", *next))
		*next++
		w.m.Nodes[id] = testNode(id)
		w.alive[id] = true
	case eventSilent: // stops answering, within grace
		w.alive[id] = false
	case eventDead: // dead past the grace period
		w.alive[id], w.dead[id] = false, true
	case eventBack:
		w.alive[id], w.dead[id] = true, false
	case eventDrain:
		if info.State == NodeActive {
			info.State = NodeDraining
			w.m.Nodes[id] = info
		}
	case eventRemove: // a node holding nothing is removed
		if info.State != NodeActive && !holdsReplica(w.m, id) {
			info.State = NodeRemoved
			w.m.Nodes[id] = info
		}
	}
	return kind, id
}

func holdsReplica(m *Map, id NodeID) bool {
	for _, rs := range m.ShardReplicas {
		if slices.Contains(rs, id) {
			return true
		}
	}
	return false
}

// BenchmarkPlanJoin plans a tenth node into 256 shards of 3 replicas.
func BenchmarkPlanJoin(b *testing.B) {
	ids := make([]NodeID, 9)
	for i := range ids {
		ids[i] = NodeID(fmt.Sprintf("n%02d", i))
	}
	w := newWorld(256, 3, ids...)
	for _, mv := range Plan(w.m, w.alive, w.deadFor) {
		if err := w.m.ApplyMove(mv); err != nil {
			b.Fatal(err)
		}
	}
	w.m.Nodes["n09"] = testNode("n09")
	w.alive["n09"] = true
	b.ResetTimer()
	for b.Loop() {
		if len(Plan(w.m, w.alive, w.deadFor)) == 0 {
			b.Fatal("empty plan")
		}
	}
}
