package raftlog

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

// newMux starts a Mux on a free loopback port, closed when the test ends.
func newMux(t *testing.T, cfg MuxConfig) *Mux {
	t.Helper()
	m, err := ListenMux("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func layerOf(t *testing.T, m *Mux, group uint64) raft.StreamLayer {
	t.Helper()
	l, err := m.Layer(group)
	if err != nil {
		t.Fatalf("Layer(%d): %v", group, err)
	}
	return l
}

func dial(t *testing.T, from raft.StreamLayer, to *Mux) net.Conn {
	t.Helper()
	c, err := from.Dial(raft.ServerAddress(to.Addr().String()), time.Second)
	if err != nil {
		t.Fatalf("Dial %s: %v", to.Addr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// accept waits up to 5 s for the next connection on l.
func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Accept: %v", r.err)
		}
		t.Cleanup(func() { _ = r.c.Close() })
		return r.c
	case <-time.After(5 * time.Second):
		t.Fatal("Accept: nothing within 5s")
		return nil
	}
}

// pipe sends msg from a to b and checks it arrives intact.
func pipe(t *testing.T, a, b net.Conn, msg string) {
	t.Helper()
	if _, err := a.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q, %v; want %q", buf, err, msg)
	}
	_ = b.SetReadDeadline(time.Time{})
}

// waitClosed asserts that c is closed, by either end, within 5 s: a read
// ends with an error that is not a timeout.
func waitClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: still open after 5s", what)
	}
}

// rawDial opens a plain TCP connection to m and writes b.
func rawDial(t *testing.T, m *Mux, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMuxRoutesByGroup: connections between two muxes reach the layer of
// the group named in their header, with the stream intact after it.
func TestMuxRoutesByGroup(t *testing.T) {
	a, b := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	for _, g := range []uint64{1, 2, 1 << 63} {
		from, to := layerOf(t, a, g), layerOf(t, b, g)
		if from.Addr().String() != a.Addr().String() {
			t.Fatalf("layer Addr %v, want the mux's %v", from.Addr(), a.Addr())
		}
		d := dial(t, from, b)
		acc := accept(t, to)
		pipe(t, d, acc, "request for group")
		pipe(t, acc, d, "response")
		if peer := acc.(*trackedConn).peer; peer != a.Addr().String() {
			t.Fatalf("accepted conn names its peer %q, want %q", peer, a.Addr())
		}
	}
}

// TestMuxRefusesBadConnections: garbage, a wrong magic or version, an
// unknown group and a silent client are each closed, and none of them
// delays or disturbs a good connection.
func TestMuxRefusesBadConnections(t *testing.T) {
	// A long HeaderTimeout: whatever is closed below is closed because it
	// was refused, not because its header was late.
	m := newMux(t, MuxConfig{HeaderTimeout: time.Minute})
	l := layerOf(t, m, 1)
	peer := newMux(t, MuxConfig{})
	pl := layerOf(t, peer, 1)

	rawDial(t, m, nil) // a silent client holds its header goroutine
	good := appendHeader(nil, header{group: 1, addr: "127.0.0.1:9"})
	bad := map[string][]byte{
		"garbage":       []byte("GET / HTTP/1.1\r\n\r\n"),
		"wrong magic":   append([]byte("L4XN"), good[4:]...),
		"wrong version": append(append([]byte("L4XM"), 9), good[5:]...),
		"unknown group": appendHeader(nil, header{group: 2, addr: "127.0.0.1:9"}),
	}
	for name, b := range bad {
		waitClosed(t, rawDial(t, m, b), name)
	}
	// The first connection Accept sees is the good one, and the silent
	// client does not hold it up.
	d := dial(t, pl, m)
	pipe(t, d, accept(t, l), "after the bad ones")

	// A silent client is dropped after HeaderTimeout.
	short := newMux(t, MuxConfig{HeaderTimeout: 100 * time.Millisecond})
	waitClosed(t, rawDial(t, short, []byte("L4XM")), "silent client")
}

// TestLayerClose: a closed layer fails Accept and Dial, closes its
// connections and unregisters its group, which can then be registered anew.
func TestLayerClose(t *testing.T) {
	m, peer := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	l, pl := layerOf(t, m, 1), layerOf(t, peer, 1)
	if _, err := m.Layer(1); !errors.Is(err, ErrGroupRegistered) {
		t.Fatalf("second Layer(1) = %v, want ErrGroupRegistered", err)
	}
	d := dial(t, pl, m)
	accept(t, l)

	blocked := make(chan error, 1)
	go func() { _, err := l.Accept(); blocked <- err }()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; !errors.Is(err, ErrLayerClosed) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept blocked across Close = %v, want ErrLayerClosed and net.ErrClosed", err)
	}
	waitClosed(t, d, "conn of a closed layer")
	if _, err := l.Dial(raft.ServerAddress(peer.Addr().String()), time.Second); !errors.Is(err, ErrLayerClosed) {
		t.Fatalf("Dial after Close = %v, want ErrLayerClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Group 1 is unknown now: a new connection is refused...
	waitClosed(t, dial(t, pl, m), "conn to an unregistered group")
	// ...until it is registered again.
	l2 := layerOf(t, m, 1)
	pipe(t, dial(t, pl, m), accept(t, l2), "again")
}

// TestMuxClose: Close closes the listener, every layer and connection,
// refuses new layers and leaves no goroutine behind.
func TestMuxClose(t *testing.T) {
	before := goleak.IgnoreCurrent()
	m, err := ListenMux("127.0.0.1:0", MuxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ListenMux("127.0.0.1:0", MuxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l, pl := layerOf(t, m, 1), layerOf(t, peer, 1)
	out := dial(t, l, peer) // dialed by m
	accept(t, pl)
	in := dial(t, pl, m) // accepted by m
	accept(t, l)
	rawDial(t, m, []byte("L4")) // header still pending at Close

	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := m.Layer(2); !errors.Is(err, ErrMuxClosed) {
		t.Fatalf("Layer after Close = %v, want ErrMuxClosed", err)
	}
	if _, err := l.Accept(); !errors.Is(err, ErrLayerClosed) {
		t.Fatalf("Accept after mux Close = %v, want ErrLayerClosed", err)
	}
	if _, err := out.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write on a dialed conn after Close = %v, want net.ErrClosed", err)
	}
	waitClosed(t, in, "accepted conn after mux Close")
	if c, err := net.Dial("tcp", m.Addr().String()); err == nil {
		c.Close()
		t.Fatal("listener still accepts after Close")
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := peer.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}

func TestMuxConfigValidate(t *testing.T) {
	for _, cfg := range []MuxConfig{
		{HeaderTimeout: -1},
		{Advertise: "no-port"},
		{Advertise: string(make([]byte, 300)) + ":1"},
	} {
		if _, err := ListenMux("127.0.0.1:0", cfg); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("ListenMux(%+v) = %v, want ErrInvalidOptions", cfg, err)
		}
	}
	if _, err := ListenMux("0.0.0.0:0", MuxConfig{}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("wildcard listener without Advertise = %v, want ErrInvalidOptions", err)
	}
	m := newMux(t, MuxConfig{Advertise: "node-1.example:7421"})
	if got := m.Addr().String(); got != "node-1.example:7421" {
		t.Fatalf("Addr = %q, want the advertised address", got)
	}
}
