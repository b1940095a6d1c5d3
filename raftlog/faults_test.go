package raftlog

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

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

// TestFaultsPause: while a Mux is paused, data sent to it is held back and
// its writes wait, but no connection is closed; Resume lets both through,
// and Close releases a paused reader.
func TestFaultsPause(t *testing.T) {
	f := &Faults{}
	a, b := newMux(t, MuxConfig{Faults: f}), newMux(t, MuxConfig{})
	la, lb := layerOf(t, a, 1), layerOf(t, b, 1)
	k := connect(t, la, a, lb, b)

	f.Pause()
	f.Pause() // idempotent
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 5)
		n, _ := io.ReadFull(k.inAcc, buf) // a reads from b
		got <- string(buf[:n])
	}()
	wrote := make(chan error, 1)
	go func() { _, err := k.outDial.Write([]byte("ab")); wrote <- err }() // a writes to b
	if _, err := k.inDial.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// Absence can only be observed for a while: nothing may arrive in
	// 100 ms. (A broken Pause lets it through at once.)
	select {
	case s := <-got:
		t.Fatalf("paused mux read %q", s)
	case err := <-wrote:
		t.Fatalf("paused mux wrote (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	f.Resume()
	f.Resume() // idempotent
	if s := <-got; s != "hello" {
		t.Fatalf("after Resume read %q, want hello", s)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("write after Resume: %v", err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(k.outAcc, buf); err != nil || string(buf) != "ab" {
		t.Fatalf("b read %q, %v; want what a wrote while paused", buf, err)
	}
	pipe(t, k.inDial, k.inAcc, "still up")

	f.Pause()
	defer f.Resume()
	released := make(chan error, 1)
	go func() { _, err := k.outDial.Write([]byte("x")); released <- err }()
	_ = k.outDial.Close()
	if err := <-released; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("paused write after Close = %v, want net.ErrClosed", err)
	}
}
