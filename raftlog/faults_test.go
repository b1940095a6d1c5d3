package raftlog

import (
	"errors"
	"net"
	"testing"

	"github.com/hashicorp/raft"
)

// link is one connection each way between two layers, as seen from both
// ends.
type link struct{ outDial, outAcc, inDial, inAcc net.Conn }

func connect(t *testing.T, a raft.StreamLayer, am *Mux, b raft.StreamLayer, bm *Mux) link {
	t.Helper()
	var k link
	k.outDial = dial(t, a, bm)
	k.outAcc = accept(t, b)
	k.inDial = dial(t, b, am)
	k.inAcc = accept(t, a)
	pipe(t, k.outDial, k.outAcc, "out")
	pipe(t, k.inDial, k.inAcc, "in")
	return k
}

// cut asserts that all four connections of k are closed at both ends.
func (k link) cut(t *testing.T, what string) {
	t.Helper()
	for _, c := range []net.Conn{k.outDial, k.outAcc, k.inDial, k.inAcc} {
		waitClosed(t, c, what)
	}
}

// refused asserts that a cannot reach bm, in either direction.
func refused(t *testing.T, a raft.StreamLayer, am *Mux, b raft.StreamLayer, bm *Mux) {
	t.Helper()
	if _, err := a.Dial(raft.ServerAddress(bm.Addr().String()), 0); !errors.Is(err, ErrPeerBlocked) {
		t.Fatalf("dial to a blocked peer = %v, want ErrPeerBlocked", err)
	}
	// b does not know a blocked it: its dial succeeds, and a closes the
	// connection right after the header.
	waitClosed(t, dial(t, b, am), "conn from a blocked peer")
}

func TestFaultsBlockAndIsolate(t *testing.T) {
	f := &Faults{}
	a := newMux(t, MuxConfig{Faults: f})
	b, c := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	la, lb, lc := layerOf(t, a, 1), layerOf(t, b, 1), layerOf(t, c, 1)

	ab, ac := connect(t, la, a, lb, b), connect(t, la, a, lc, c)
	f.Block(b.Addr().String())
	if !f.Blocked(b.Addr().String()) || f.Blocked(c.Addr().String()) {
		t.Fatal("Blocked does not report the blocked peer alone")
	}
	ab.cut(t, "blocked peer")
	refused(t, la, a, lb, b)
	// c is untouched: its connections still carry data.
	pipe(t, ac.outDial, ac.outAcc, "still up")
	pipe(t, ac.inDial, ac.inAcc, "still up")

	f.Unblock(b.Addr().String())
	ab = connect(t, la, a, lb, b)

	f.Isolate()
	ab.cut(t, "isolated")
	ac.cut(t, "isolated")
	refused(t, la, a, lb, b)
	refused(t, la, a, lc, c)
	f.Unblock(b.Addr().String()) // does not undo Isolate
	refused(t, la, a, lb, b)

	f.Block(c.Addr().String())
	f.Heal() // undoes Isolate and every Block
	connect(t, la, a, lb, b)
	connect(t, la, a, lc, c)
}

func TestFaultsNil(t *testing.T) {
	var f *Faults
	if f.Blocked("x:1") {
		t.Fatal("nil Faults blocks")
	}
	if !f.track("x:1", nil) {
		t.Fatal("nil Faults refuses")
	}
	f.untrack("x:1", nil)
}
