package gossip

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/testwait"
)

type eventLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *eventLog) has(kind EventKind, id topology.NodeID, state MemberState) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.ev {
		if e.Kind == kind && e.Member.ID == id && e.Member.State == state {
			return true
		}
	}
	return false
}

func startMember(t *testing.T, id topology.NodeID, log *eventLog) *Membership {
	t.Helper()
	m, err := New(Config{
		NodeID:   id,
		BindAddr: "127.0.0.1:0",
		Meta:     topology.NodeMeta{GRPCAddr: string(id) + ":7420", RaftAddr: string(id) + ":7421", HTTPAddr: string(id) + ":7423"},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnEvent:  log.add,
		Timing:   FastTiming(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Join([]string{"127.0.0.1:1"}); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("join before start: %v", err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

func state(m *Membership, id topology.NodeID) (Member, bool) {
	for _, mem := range m.Members() {
		if mem.ID == id {
			return mem, true
		}
	}
	return Member{}, false
}

func TestMembership(t *testing.T) {
	logs := map[topology.NodeID]*eventLog{"a": {}, "b": {}, "c": {}}
	a, b, c := startMember(t, "a", logs["a"]), startMember(t, "b", logs["b"]), startMember(t, "c", logs["c"])
	if a.Addr() == "127.0.0.1:0" || a.Addr() == "" {
		t.Fatalf("advertised %q, want the bound port", a.Addr())
	}
	for _, m := range []*Membership{b, c} {
		if n, err := m.Join([]string{a.Addr()}); err != nil || n != 1 {
			t.Fatalf("join: %d, %v", n, err)
		}
	}
	all := []*Membership{a, b, c}
	for _, m := range all {
		testwait.For(t, 5*time.Second, "every member sees three alive", func() bool {
			n := 0
			for _, mem := range m.Members() {
				if mem.State == MemberAlive {
					n++
				}
			}
			return n == 3
		})
	}
	mem, _ := state(a, "c")
	want := topology.NodeMeta{ID: "c", GRPCAddr: "c:7420", RaftAddr: "c:7421", HTTPAddr: "c:7423"}
	if mem.Meta != want || mem.MetaErr != nil || mem.Addr != c.Addr() {
		t.Fatalf("a sees c as %+v, want meta %+v at %s", mem, want, c.Addr())
	}
	testwait.For(t, 5*time.Second, "join events", func() bool { return logs["a"].has(EventJoin, "c", MemberAlive) })

	// Metadata changes travel too.
	if err := b.UpdateMeta(topology.NodeMeta{GRPCAddr: "b:9999", RaftAddr: "b:7421"}, time.Second); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "a sees b's new address", func() bool {
		mem, _ := state(a, "b")
		return mem.Meta.GRPCAddr == "b:9999"
	})
	testwait.For(t, 5*time.Second, "update event", func() bool { return logs["a"].has(EventUpdate, "b", MemberAlive) })
	// So does a full disk, with the new address kept, and its end; and
	// a node leaving with a full disk still says so.
	if err := b.SetDiskFull(true, time.Second); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "a sees b's disk full", func() bool {
		mem, _ := state(a, "b")
		return mem.DiskFull && mem.Meta.GRPCAddr == "b:9999"
	})
	if err := b.SetDiskFull(false, time.Second); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "a sees b's disk with room again", func() bool {
		mem, _ := state(a, "b")
		return !mem.DiskFull
	})
	if err := c.SetDiskFull(true, time.Second); err != nil {
		t.Fatal(err)
	}

	// c leaves on purpose: left, not dead.
	if err := c.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Fatalf("leave after shutdown: %v", err)
	}
	if err := c.Start(); !errors.Is(err, ErrShutdown) {
		t.Fatalf("start after shutdown: %v", err)
	}
	for _, m := range []*Membership{a, b} {
		testwait.For(t, 5*time.Second, "c seen as left", func() bool {
			mem, ok := state(m, "c")
			return ok && mem.State == MemberLeft && mem.DiskFull
		})
	}
	// b just stops: a finds it dead by probing.
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "b seen as dead", func() bool {
		mem, ok := state(a, "b")
		return ok && mem.State == MemberDead
	})
	testwait.For(t, 5*time.Second, "leave event", func() bool { return logs["a"].has(EventLeave, "b", MemberDead) })

	// b restarts on another port under the same id: once the dead entry
	// may be reclaimed, a accepts the new address.
	b2 := startMember(t, "b", &eventLog{})
	testwait.For(t, 10*time.Second, "b back at its new address", func() bool {
		b2.Join([]string{a.Addr()})
		mem, _ := state(a, "b")
		return mem.State == MemberAlive && mem.Addr == b2.Addr()
	})
}

func TestConfigValidate(t *testing.T) {
	ok := Config{NodeID: "n1"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("zero config with a node id: %v", err)
	}
	for i, c := range []Config{
		{},
		{NodeID: "bad id"},
		{NodeID: "n1", BindAddr: "nohost"},
		{NodeID: "n1", BindAddr: "localhost:7422"},
		{NodeID: "n1", BindAddr: ":7422"},
		{NodeID: "n1", BindAddr: "127.0.0.1:70000"},
		{NodeID: "n1", AdvertiseAddr: "x"},
		{NodeID: "n1", Meta: topology.NodeMeta{ID: "n2"}},
		{NodeID: "n1", Timing: Timing{ProbeInterval: -1}},
	} {
		if err := c.Validate(); !errors.Is(err, topology.ErrConfig) {
			t.Errorf("case %d (%s): Validate = %v, want ErrConfig", i, fmt.Sprint(c.NodeID), err)
		}
	}
}

// TestAliveSet: only the members gossip holds alive are in the set.
func TestAliveSet(t *testing.T) {
	got := AliveSet([]Member{{ID: "a", State: MemberAlive}, {ID: "b", State: MemberDead}, {ID: "c", State: MemberLeft}, {ID: "x", State: MemberAlive}})
	if len(got) != 2 || !got["a"] || !got["x"] {
		t.Fatalf("AliveSet = %v, want a and x", got)
	}
}

// TestMaxMetaSizeIsMemberlists: the state's bound on gossiped metadata is
// memberlist's own.
func TestMaxMetaSizeIsMemberlists(t *testing.T) {
	if topology.MaxMetaSize != memberlist.MetaMaxSize {
		t.Fatalf("topology.MaxMetaSize %d, memberlist.MetaMaxSize %d", topology.MaxMetaSize, memberlist.MetaMaxSize)
	}
}
