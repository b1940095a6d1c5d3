package gossip

import (
	"bytes"
	"compress/lzw"
	"io"
	"log"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"

	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/testwait"
)

// gossipNode starts a Membership on loopback with fast timing, the given
// seeds and faults, logging to log (nil: nowhere); it shuts down when the
// test ends.
func gossipNode(t *testing.T, id topology.NodeID, seeds []string, faults *Faults, log ...io.Writer) *Membership {
	t.Helper()
	out := io.Discard
	if len(log) > 0 {
		out = log[0]
	}
	m, err := New(Config{
		NodeID: id, BindAddr: "127.0.0.1:0",
		Meta:   topology.NodeMeta{GRPCAddr: string(id) + ":7420", RaftAddr: string(id) + ":7421"},
		Logger: slog.New(slog.NewTextHandler(out, nil)),
		Timing: FastTiming(), Seeds: seeds, Faults: faults,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	return m
}

// allAlive reports whether every one of ms sees every other alive.
func allAlive(ms ...*Membership) bool {
	for _, m := range ms {
		n := 0
		for _, mem := range m.Members() {
			if mem.State == MemberAlive {
				n++
			}
		}
		if n != len(ms) {
			return false
		}
	}
	return true
}

// frame is a memberlist message: its type byte, then each part in msgpack
// (a []byte part is raw).
func frame(t testing.TB, typ byte, parts ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteByte(typ)
	enc := codec.NewEncoder(&b, &codec.MsgpackHandle{})
	for _, p := range parts {
		if raw, ok := p.([]byte); ok {
			b.Write(raw)
			continue
		}
		if err := enc.Encode(p); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// compressed wraps msg as memberlist's compress message.
func compressed(t testing.TB, msg []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	w := lzw.NewWriter(&z, lzw.LSB, 8)
	w.Write(msg)
	w.Close()
	return frame(t, mlCompress, mlCompressMsg{Algo: 0, Buf: z.Bytes()})
}

// labeled prefixes msg with memberlist's label header.
func labeled(label string, msg []byte) []byte {
	return append([]byte{mlHasLabel, byte(len(label))}, append([]byte(label), msg...)...)
}

// attackStreams are TCP stream messages that make memberlist v0.5.4 panic
// (makeslice: len out of range, or index out of range) in the goroutine
// that reads them, which kills the process.
func attackStreams(t testing.TB) map[string][]byte {
	nodesNeg := frame(t, mlPushPull, mlPushPullHeader{Nodes: -1})
	return map[string][]byte{
		"push/pull Nodes -1":            nodesNeg,
		"push/pull UserStateLen 1<<62":  frame(t, mlPushPull, mlPushPullHeader{UserStateLen: 1 << 62}),
		"user message UserMsgLen 1<<62": frame(t, mlUser, mlUserMsgHeader{UserMsgLen: 1 << 62}),
		"push/pull of a node with Vsn [1]": frame(t, mlPushPull, mlPushPullHeader{Nodes: 1},
			mlPushNodeState{Name: "x", Addr: net.IPv4(127, 0, 0, 1).To4(), Port: 1, Vsn: []uint8{1}}),
		"compressed push/pull Nodes -1": compressed(t, nodesNeg),
		"labeled push/pull Nodes -1":    labeled("grid", nodesNeg),
	}
}

// sendStream writes msg on a new TCP connection to addr and waits until
// the other end closes it (or a second passes).
func sendStream(t *testing.T, addr string, msg []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, c)
}

// TestGossipSurvivesHostileFrames (defect 10): frames of a few bytes sent
// to the gossip port are refused and counted; the node lives on and
// gossips: a new member joins it and all see each other alive.
func TestGossipSurvivesHostileFrames(t *testing.T) {
	a := gossipNode(t, "a", nil, nil)
	b := gossipNode(t, "b", []string{a.Addr()}, nil)
	testwait.For(t, 10*time.Second, "a and b meet", func() bool { return allAlive(a, b) })

	streams := attackStreams(t)
	for name, msg := range streams {
		t.Logf("sending %s (%d bytes)", name, len(msg))
		sendStream(t, a.Addr(), msg)
	}
	// An alive message for b, a known member at its address, with a newer
	// incarnation and three protocol versions: memberlist indexes the
	// sixth.
	udp, err := net.Dial("udp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	_, bport, _ := splitIPPort(b.Addr())
	alive := frame(t, mlAlive, mlAliveMsg{Incarnation: 1 << 20, Node: "b", Addr: net.IPv4(127, 0, 0, 1).To4(), Port: uint16(bport), Vsn: []uint8{1, 5, 2}})
	if _, err := udp.Write(alive); err != nil {
		t.Fatal(err)
	}
	want := uint64(len(streams) + 1)
	testwait.For(t, 10*time.Second, "every frame refused", func() bool { return a.RefusedFrames() == want })

	c := gossipNode(t, "c", []string{a.Addr()}, nil)
	testwait.For(t, 10*time.Second, "c joins, all alive", func() bool { return allAlive(a, b, c) })
	if mem, _ := state(a, "b"); mem.Addr != b.Addr() {
		t.Fatalf("a sees b at %s, want %s", mem.Addr, b.Addr())
	}
}

func TestCheckStreamPassesMemberlistTraffic(t *testing.T) {
	node := mlPushNodeState{Name: "a", Addr: []byte{127, 0, 0, 1}, Port: 7422, Vsn: []uint8{1, 5, 2, 0, 0, 0}}
	pp := frame(t, mlPushPull, mlPushPullHeader{Nodes: 2, UserStateLen: 3, Join: true}, node, node, []byte("abc"))
	for name, msg := range map[string][]byte{
		"push/pull":            pp,
		"compressed push/pull": compressed(t, pp),
		"labeled push/pull":    labeled("x", pp),
		"user message":         frame(t, mlUser, mlUserMsgHeader{UserMsgLen: 2}, []byte("hi")),
		"ping":                 frame(t, mlPing, mlPingMsg{SeqNo: 7, Node: "a"}),
		"ack":                  frame(t, mlAck, mlAckMsg{SeqNo: 7}),
		"error":                frame(t, mlErr, mlErrMsg{Error: "no"}),
	} {
		if err := checkStream(bytes.NewReader(msg)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := checkStream(bytes.NewReader(nil)); err != io.EOF {
		t.Errorf("empty stream: %v, want io.EOF", err)
	}
	for name, msg := range attackStreams(t) {
		if err := checkStream(bytes.NewReader(msg)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheckPacket(t *testing.T) {
	good := frame(t, mlAlive, mlAliveMsg{Node: "a", Vsn: []uint8{1, 5, 2, 0, 0, 0}})
	bad := frame(t, mlAlive, mlAliveMsg{Node: "a", Vsn: []uint8{1, 5, 2}})
	compound := func(parts ...[]byte) []byte {
		b := []byte{mlCompound, byte(len(parts))}
		for _, p := range parts {
			b = append(b, byte(len(p)>>8), byte(len(p)))
		}
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	crc := func(msg []byte) []byte { return append([]byte{mlHasCrc, 0, 0, 0, 0}, msg...) }
	for _, tc := range []struct {
		name string
		buf  []byte
		ok   bool
	}{
		{"alive", good, true},
		{"alive without versions", frame(t, mlAlive, mlAliveMsg{Node: "a"}), true},
		{"alive with 3 versions", bad, false},
		{"compound", compound(good, good), true},
		{"compound with a bad part", compound(good, bad), false},
		{"compressed", compressed(t, bad), false},
		{"crc and label", labeled("l", crc(compound(good, bad))), false},
		{"empty", nil, true},
	} {
		if err := checkPacket(tc.buf); (err == nil) != tc.ok {
			t.Errorf("%s: checkPacket = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// TestShutDownTransportDropsPackets: memberlist shuts its transport down
// before its own gossip and probes stop, so a packet sent after Shutdown
// is dropped, as UDP may lose one, not failed: memberlist logs a failed
// send as an error, which every clean stop then printed.
func TestShutDownTransportDropsPackets(t *testing.T) {
	peer, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	tr, err := newTransport("127.0.0.1", 0, nil, nil, slog.New(slog.DiscardHandler), log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	to := peer.LocalAddr().String()
	if _, err := tr.WriteTo([]byte("before"), to); err != nil {
		t.Fatalf("WriteTo before Shutdown: %v", err)
	}
	if err := tr.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WriteTo([]byte("after"), to); err != nil {
		t.Errorf("WriteTo after Shutdown: %v, want the packet dropped", err)
	}
	if _, err := tr.WriteToAddress([]byte("after"), memberlist.Address{Addr: to, Name: "peer"}); err != nil {
		t.Errorf("WriteToAddress after Shutdown: %v, want the packet dropped", err)
	}
}
