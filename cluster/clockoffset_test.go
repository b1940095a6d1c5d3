package cluster

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/testclock"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/shard"
)

// newPinged returns a ClockOffsets on fake clocks (max offset 250 ms,
// window 10 s), the runtime clock, and ping, which records an estimate of
// peer as if its clock ran at local+d and its ack arrived after rtt (the
// peer read its clock half a round trip before this node reads its own).
func newPinged(t *testing.T) (o *ClockOffsets, runtime *testclock.Clock, ping func(peer topology.NodeID, d, rtt time.Duration)) {
	t.Helper()
	local, runtime := testclock.New(), testclock.New()
	o, err := NewClockOffsets(ClockOffsetsConfig{Clock: local.Now, Now: runtime.Now, MaxOffset: 250 * time.Millisecond, Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return o, runtime, func(peer topology.NodeID, d, rtt time.Duration) {
		c := &ClockOffsets{clock: func() time.Time { return local.Now().Add(d - rtt/2) }}
		o.Observe(peer, c.AckPayload(), rtt)
	}
}

// TestClockOffsetEstimate: the estimate is peerTime - (localNow - rtt/2),
// with an uncertainty of rtt/2; the node's offset is the median of its
// peers'; it is outside the bound only when more than half of the peers
// it knows are recently measured beyond it, allowing for each estimate's
// uncertainty, and inside when at least half are measured within it;
// between the two the verdict stands; departed peers stop counting;
// unreadable payloads are ignored.
func TestClockOffsetEstimate(t *testing.T) {
	o, runtime, ping := newPinged(t)
	if o.Check() != nil || o.Report().Offset != 0 || !o.Report().OK {
		t.Fatalf("no peer measured: %+v, %v; want OK at 0", o.Report(), o.Check())
	}
	ping("a", 300*time.Millisecond, 20*time.Millisecond)
	if off, ok := o.Offset("a"); !ok || off != 300*time.Millisecond {
		t.Fatalf("offset of a: %v %v, want 300ms: the ack's clock was read rtt/2 before the ack arrived", off, ok)
	}
	r := o.Report()
	if r.OK || r.Outside != 1 || r.Peers[0].Uncertainty != 10*time.Millisecond {
		t.Fatalf("one peer 300ms ahead: %+v; want outside, uncertainty 10ms", r)
	}
	if err := o.Check(); !errors.Is(err, shard.ErrClockOffset) || !strings.Contains(err.Error(), "300ms behind its peers'") {
		t.Fatalf("check: %v; want ErrClockOffset naming the offset", err)
	}
	// A second peer within the bound: one of two beyond is no majority,
	// and the median of two is the one nearer zero.
	ping("b", -100*time.Millisecond, 2*time.Millisecond)
	if r := o.Report(); !r.OK || r.Offset != -100*time.Millisecond || o.Check() != nil {
		t.Fatalf("peers at +300ms and -100ms: %+v, %v; want OK at -100ms", r, o.Check())
	}
	// Both beyond: outside (the median of two is the one nearer zero).
	ping("b", -400*time.Millisecond, 2*time.Millisecond)
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "300ms behind its peers'") || !strings.Contains(err.Error(), "2 of them beyond") {
		t.Fatalf("peers at +300ms and -400ms: %v; want outside", err)
	}
	ping("a", -300*time.Millisecond, 2*time.Millisecond)
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "300ms ahead of its peers'") {
		t.Fatalf("peers at -300ms and -400ms: %v; want outside, ahead", err)
	}
	ping("a", 300*time.Millisecond, 20*time.Millisecond)
	// An estimate beyond the bound only by less than its uncertainty
	// counts neither as beyond nor as within: the verdict (outside) stands.
	ping("b", -270*time.Millisecond, 60*time.Millisecond)
	if r := o.Report(); r.OK || r.Outside != 1 || r.Peers[1].Outside || r.Peers[1].Within {
		t.Fatalf("b at -270ms ± 30ms: %+v; want b neither beyond nor within, still outside", r)
	}
	ping("b", -400*time.Millisecond, 2*time.Millisecond)
	// Departed peers and old estimates stop counting.
	o.Forget("b")
	if r := o.Report(); len(r.Peers) != 1 || r.OK {
		t.Fatalf("after b left: %+v", r)
	}
	// With every estimate older than the window, too few are recent to
	// tell: the verdict stands. Once a is gone too, no peer is known, and
	// the node is inside.
	runtime.Add(11 * time.Second)
	if r := o.Report(); len(r.Peers) != 0 || r.Known != 1 || r.OK {
		t.Fatalf("after the window: %+v; want no recent peer of 1 known, still outside", r)
	}
	o.Forget("a")
	if r := o.Report(); r.Known != 0 || !r.OK || o.Check() != nil {
		t.Fatalf("no peer known: %+v, %v; want OK", r, o.Check())
	}
	for _, bad := range [][]byte{nil, {2, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 2, 3}} {
		o.Observe("c", bad, time.Millisecond)
	}
	if _, ok := o.Offset("c"); ok {
		t.Fatal("an unreadable payload was taken as an estimate")
	}
	// Three peers: the median, and two of three beyond is a majority.
	ping("a", 300*time.Millisecond, 0)
	ping("b", 290*time.Millisecond, 0)
	ping("c", 0, 0)
	if r := o.Report(); r.OK || r.Offset != 290*time.Millisecond {
		t.Fatalf("peers at +300, +290, 0: %+v; want outside at 290ms", r)
	}
}

// TestClockOffsetStaleEstimate: a correct node of three, whose estimate of
// its other correct peer went stale while the peer with the bad clock was
// measured again, stays inside: one peer beyond of two known is no
// majority. It goes outside only once both are measured beyond it.
func TestClockOffsetStaleEstimate(t *testing.T) {
	o, runtime, pingRTT := newPinged(t)
	ping := func(peer topology.NodeID, d time.Duration) { pingRTT(peer, d, 0) }
	ping("good", 0)
	ping("bad", -300*time.Millisecond)
	if r := o.Report(); !r.OK {
		t.Fatalf("one of two peers beyond: %+v; want inside", r)
	}
	runtime.Add(11 * time.Second)
	ping("bad", -300*time.Millisecond)
	if r := o.Report(); !r.OK || len(r.Peers) != 1 || r.Known != 2 || o.Check() != nil {
		t.Fatalf("good's estimate stale, bad's fresh: %+v, %v; want still inside", r, o.Check())
	}
	ping("good", -300*time.Millisecond)
	if r := o.Report(); r.OK {
		t.Fatalf("both peers beyond: %+v; want outside", r)
	}
}

func TestMedian(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0}, {ms(5), 5 * time.Millisecond}, {ms(7, -3), -3 * time.Millisecond}, {ms(-7, 3), 3 * time.Millisecond},
		{ms(9, 1, 5), 5 * time.Millisecond}, {ms(-10, -1, 2, 10), -1 * time.Millisecond},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestClockOffsetsOverGossip: three members on loopback, through the
// gossip guard (package gossip's transport), measure each other from the
// clocks in their acks: the one whose clock runs 400 ms behind finds itself
// outside the bound; the other two, each with one of two peers beyond it,
// do not.
// When its clock is set right, it is back inside.
func TestClockOffsetsOverGossip(t *testing.T) {
	base := testclock.New()
	var skew atomic.Int64 // ms, c's clock
	clocks := map[topology.NodeID]func() time.Time{
		"a": base.Now, "b": base.Now,
		"c": func() time.Time { return base.Now().Add(time.Duration(skew.Load()) * time.Millisecond) },
	}
	skew.Store(-400)
	offsets := map[topology.NodeID]*ClockOffsets{}
	var members []*gossip.Membership
	for _, id := range []topology.NodeID{"a", "b", "c"} {
		o, err := NewClockOffsets(ClockOffsetsConfig{Clock: clocks[id], MaxOffset: 250 * time.Millisecond, Timing: gossip.FastTiming()})
		if err != nil {
			t.Fatal(err)
		}
		offsets[id] = o
		m, err := gossip.New(gossip.Config{NodeID: id, BindAddr: "127.0.0.1:0",
			Meta:   topology.NodeMeta{GRPCAddr: string(id) + ":7420", RaftAddr: string(id) + ":7421"},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Timing: gossip.FastTiming(), Clocks: o})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown() })
		members = append(members, m)
	}
	for _, m := range members[1:] {
		if _, err := m.Join([]string{members[0].Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	measured := func(id topology.NodeID, peers int) bool { return len(offsets[id].Report().Peers) == peers }
	testwait.For(t, 20*time.Second, "every member to measure both of its peers", func() bool {
		return measured("a", 2) && measured("b", 2) && measured("c", 2)
	})
	testwait.For(t, 20*time.Second, "c to find itself outside the bound", func() bool { return offsets["c"].Check() != nil })
	if err := offsets["c"].Check(); !strings.Contains(err.Error(), "behind its peers'") {
		t.Errorf("c's verdict: %v", err)
	}
	for _, id := range []topology.NodeID{"a", "b"} {
		r := offsets[id].Report()
		if !r.OK || r.Outside != 1 {
			t.Errorf("%s: %+v; want OK with one peer (c) beyond the bound", id, r)
		}
		if off, _ := offsets[id].Offset("c"); off > -350*time.Millisecond || off < -450*time.Millisecond {
			t.Errorf("%s measures c at %v, want about -400ms", id, off)
		}
	}
	for _, m := range members {
		if n := m.RefusedFrames(); n != 0 {
			t.Errorf("%d gossip frames refused: the acks' payloads must pass the guard", n)
		}
	}
	skew.Store(0)
	testwait.For(t, 20*time.Second, "c back inside the bound", func() bool { return offsets["c"].Check() == nil })
}

// An estimate too uncertain to place inside or outside the bound (its
// ping's round trip stalled) moves the verdict neither way: a node
// measured outside stays outside until its peers are measured within the
// bound by more than the uncertainty, and the same holds the other way.
func TestClockOffsetUncertainEstimate(t *testing.T) {
	o, _, ping := newPinged(t)
	// This node runs 300 ms ahead of both peers.
	ping("a", -300*time.Millisecond, time.Millisecond)
	ping("b", -300*time.Millisecond, time.Millisecond)
	if r := o.Report(); r.OK {
		t.Fatalf("both peers 300 ms behind: %+v; want outside", r)
	}
	// A ping that took 120 ms: 300 ms behind, give or take 60, may be
	// within the bound of 250 ms or beyond it.
	ping("a", -300*time.Millisecond, 120*time.Millisecond)
	if r := o.Report(); r.OK || o.Check() == nil {
		t.Fatalf("one peer's estimate uncertain, the other's beyond: %+v; want still outside", r)
	}
	ping("b", -300*time.Millisecond, 120*time.Millisecond)
	if r := o.Report(); r.OK {
		t.Fatalf("both estimates uncertain: %+v; want still outside (the last verdict)", r)
	}
	// Set right: decisive estimates bring it inside.
	ping("a", 0, time.Millisecond)
	if r := o.Report(); !r.OK {
		t.Fatalf("one of two peers measured within: %+v; want inside", r)
	}
	// And an uncertain estimate does not take it outside either.
	ping("a", -300*time.Millisecond, 120*time.Millisecond)
	ping("b", -300*time.Millisecond, 120*time.Millisecond)
	if r := o.Report(); !r.OK {
		t.Fatalf("both estimates uncertain after inside: %+v; want still inside", r)
	}
}
