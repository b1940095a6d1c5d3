package raftlog

import (
	"bytes"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/testwait"
)

func sampleAppendRequests() []*raft.AppendEntriesRequest {
	return []*raft.AppendEntriesRequest{
		{},
		{ // a heartbeat
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("127.0.0.1:7001")},
			Term:      9,
		},
		{
			RPCHeader:         raft.RPCHeader{ProtocolVersion: 3, ID: []byte("node-2"), Addr: []byte("10.0.0.2:7421")},
			Term:              1 << 40,
			Leader:            []byte("10.0.0.2:7421"),
			PrevLogEntry:      41,
			PrevLogTerm:       7,
			LeaderCommitIndex: 40,
			Entries: []*raft.Log{
				{Index: 42, Term: 7, Type: raft.LogCommand, Data: bytes.Repeat([]byte{0xAB}, 300), AppendedAt: time.Unix(1_700_000_000, 123).UTC()},
				{Index: 43, Term: 7, Type: raft.LogConfiguration, Data: []byte("c"), Extensions: []byte("ext")},
				{Index: 44, Term: 7, Type: raft.LogNoop},
			},
		},
	}
}

func sampleAppendResponses() []*raft.AppendEntriesResponse {
	return []*raft.AppendEntriesResponse{
		{},
		{RPCHeader: raft.RPCHeader{ProtocolVersion: 3, ID: []byte("n2"), Addr: []byte("a:1")}, Term: 5, LastLog: 1 << 50, Success: true},
		{Term: 6, LastLog: 3, NoRetryBackoff: true},
	}
}

// TestAppendFrameRoundTrip: what the codec writes, it reads back equal.
func TestAppendFrameRoundTrip(t *testing.T) {
	for i, want := range sampleAppendRequests() {
		b := appendRequestFrame([]byte("junk before"), uint64(i)+1, 1<<33, want)
		f, err := decodeAppendFrame(b[len("junk before")+frameLenSize:])
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if f.kind != frameAppendRequest || f.call != uint64(i)+1 || f.group != 1<<33 || !reflect.DeepEqual(f.req, want) {
			t.Fatalf("request %d: got %+v (%+v), want %+v", i, f, f.req, want)
		}
	}
	for i, want := range sampleAppendResponses() {
		for _, msg := range []string{"", "log not found"} {
			b := appendResponseFrame(nil, 77, msg, want)
			f, err := decodeAppendFrame(b[frameLenSize:])
			if err != nil {
				t.Fatalf("response %d: %v", i, err)
			}
			if f.kind != frameAppendResponse || f.call != 77 || f.errMsg != msg || !reflect.DeepEqual(f.resp, want) {
				t.Fatalf("response %d: got %+v (%+v), want %+v", i, f, f.resp, want)
			}
		}
	}
}

// FuzzAppendFrame: decoding never panics, errors wrap ErrCorrupt, and what
// is accepted is canonical: it re-encodes to the very bytes.
func FuzzAppendFrame(f *testing.F) {
	for i, r := range sampleAppendRequests() {
		f.Add(appendRequestFrame(nil, uint64(i), 3, r)[frameLenSize:])
	}
	for _, r := range sampleAppendResponses() {
		f.Add(appendResponseFrame(nil, 1, "e", r)[frameLenSize:])
	}
	f.Add([]byte{frameAppendRequest, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeAppendFrame(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		var re []byte
		if fr.kind == frameAppendRequest {
			re = appendRequestFrame(nil, fr.call, fr.group, fr.req)
		} else {
			re = appendResponseFrame(nil, fr.call, fr.errMsg, fr.resp)
		}
		if !bytes.Equal(re[frameLenSize:], b) {
			t.Fatalf("accepted a non-canonical frame:\n in %x\nout %x", b, re[frameLenSize:])
		}
	})
}

// answerAppends answers tr's AppendEntries like a follower that has
// everything, until done; it counts the calls.
func answerAppends(tr *Transport, done <-chan struct{}, calls *int) {
	for {
		select {
		case rpc := <-tr.Consumer():
			req := rpc.Command.(*raft.AppendEntriesRequest)
			*calls++
			rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true, LastLog: req.PrevLogEntry + uint64(len(req.Entries))}, nil)
		case <-done:
			return
		}
	}
}

// newTransport is NewTransport of group on m, closed when the test ends.
func newTransport(t *testing.T, m *Mux, group uint64, cfg TransportConfig) *Transport {
	t.Helper()
	tr, err := NewTransport(m, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// answering answers tr's AppendEntries (answerAppends) until the test ends.
func answering(t *testing.T, tr *Transport) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var calls int
	wg.Go(func() { answerAppends(tr, done, &calls) })
	t.Cleanup(func() { close(done); wg.Wait() })
}

// serving hands every RPC tr receives to answer until the test ends.
func serving(t *testing.T, tr *Transport, answer func(raft.RPC)) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case rpc := <-tr.Consumer():
				answer(rpc)
			case <-done:
				return
			}
		}
	})
	t.Cleanup(func() { close(done); wg.Wait() })
}

// liveStreams is the number of live append stream connections of m.
func liveStreams(m *Mux) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.appendConns)
}

// TestAppendStreamSharedByGroups: the AppendEntries of two groups to the
// same peer, sent at once, share one connection, and each reaches its own
// group.
func TestAppendStreamSharedByGroups(t *testing.T) {
	a, b := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	cfg := TransportConfig{Timeout: 5 * time.Second}
	var senders, receivers []*Transport
	for _, g := range []uint64{1, 2} {
		for _, m := range []*Mux{a, b} {
			tr, err := NewTransport(m, g, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tr.Close() })
			if m == a {
				senders = append(senders, tr)
			} else {
				receivers = append(receivers, tr)
			}
		}
	}
	done := make(chan struct{})
	calls := make([]int, len(receivers))
	var wg sync.WaitGroup
	for i, tr := range receivers {
		wg.Go(func() { answerAppends(tr, done, &calls[i]) })
	}
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(done); wg.Wait() }) }
	defer stop()

	const perGroup = 200
	var senderWG sync.WaitGroup
	errs := make(chan error, len(senders))
	for _, tr := range senders {
		senderWG.Go(func() {
			for i := range uint64(perGroup) {
				req := &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: i, Entries: []*raft.Log{{Index: i + 1, Term: 1, Data: []byte("x")}}}
				var resp raft.AppendEntriesResponse
				if err := tr.AppendEntries("b", raft.ServerAddress(b.Addr().String()), req, &resp); err != nil {
					errs <- err
					return
				}
				if resp.LastLog != i+1 || !resp.Success {
					errs <- errors.New("wrong answer")
					return
				}
			}
		})
	}
	senderWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := liveStreams(a); got != 1 {
		t.Errorf("the sender has %d append stream connections, want 1 for both groups", got)
	}
	if got := liveStreams(b); got != 1 {
		t.Errorf("the receiver has %d append stream connections, want 1", got)
	}
	stop()
	for i, n := range calls {
		if n != perGroup {
			t.Errorf("group %d received %d AppendEntries, want %d", i+1, n, perGroup)
		}
	}
}

// TestHeartbeatsTakeTheMainLoop: a heartbeat, by the append stream or by
// the NetworkTransport, comes through Consumer to raft's main loop, never
// to the fast-path handler raft sets (SetHeartbeatHandler says why), and
// its answer comes back.
func TestHeartbeatsTakeTheMainLoop(t *testing.T) {
	a, b := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	ta := newTransport(t, a, 1, TransportConfig{})
	tb := newTransport(t, b, 1, TransportConfig{})
	var fastPath atomic.Int32
	tb.SetHeartbeatHandler(func(rpc raft.RPC) {
		fastPath.Add(1)
		rpc.Respond(&raft.AppendEntriesResponse{Term: 4, Success: true}, nil)
	})
	serving(t, tb, func(rpc raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Term: 5, Success: true}, nil) })
	send := map[string]func(*raft.AppendEntriesRequest, *raft.AppendEntriesResponse) error{
		"append stream": func(req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
			return ta.AppendEntries("b", raft.ServerAddress(b.Addr().String()), req, resp)
		},
		"NetworkTransport": func(req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
			return ta.NetworkTransport.AppendEntries("b", raft.ServerAddress(b.Addr().String()), req, resp)
		},
	}
	for name, fn := range send {
		hb := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{Addr: []byte(a.Addr().String())}, Term: 4}
		var resp raft.AppendEntriesResponse
		if err := fn(hb, &resp); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !resp.Success || resp.Term != 5 {
			t.Errorf("%s: heartbeat answer %+v, want the main loop's (term 5)", name, resp)
		}
	}
	if n := fastPath.Load(); n != 0 {
		t.Errorf("the fast-path handler answered %d heartbeats, want none", n)
	}
}

// TestAppendStreamErrors: a group the peer does not serve and a follower
// that answers with an error both come back as errors naming the cause,
// and the stream goes on serving.
func TestAppendStreamErrors(t *testing.T) {
	a, b := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	ta := newTransport(t, a, 5, TransportConfig{})
	req := &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1, Entries: []*raft.Log{{Index: 2, Term: 1}}}
	var resp raft.AppendEntriesResponse
	if err := ta.AppendEntries("b", raft.ServerAddress(b.Addr().String()), req, &resp); err == nil || !strings.Contains(err.Error(), "group 5 is not served") {
		t.Fatalf("AppendEntries to a group the peer lacks = %v, want 'group 5 is not served'", err)
	}
	tb := newTransport(t, b, 5, TransportConfig{})
	go func() {
		rpc := <-tb.Consumer()
		rpc.Respond(nil, errors.New("follower says no"))
	}()
	if err := ta.AppendEntries("b", raft.ServerAddress(b.Addr().String()), req, &resp); err == nil || err.Error() != "follower says no" {
		t.Fatalf("AppendEntries answered with an error = %v, want the follower's error", err)
	}
	if got := liveStreams(a); got != 1 {
		t.Fatalf("%d append streams after the errors, want the one still open", got)
	}
}

// TestAppendStreamCloseEndsCalls: a call waiting for a follower that does
// not answer returns raft.ErrTransportShutdown when its transport closes,
// and the follower's side answers a waiting call with the shutdown error
// when the follower's transport closes.
func TestAppendStreamCloseEndsCalls(t *testing.T) {
	a, b := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	ta := newTransport(t, a, 1, TransportConfig{})
	tb := newTransport(t, b, 1, TransportConfig{})
	req := &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1, Entries: []*raft.Log{{Index: 2, Term: 1}}}

	call := func(tr *Transport) chan error {
		ch := make(chan error, 1)
		go func() {
			var resp raft.AppendEntriesResponse
			ch <- tr.AppendEntries("b", raft.ServerAddress(b.Addr().String()), req, &resp)
		}()
		return ch
	}
	got := call(ta)
	rpc := <-tb.Consumer() // arrived; never answered
	_ = rpc
	if err := ta.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, raft.ErrTransportShutdown) {
		t.Fatalf("call of a closed transport = %v, want ErrTransportShutdown", err)
	}

	ta2 := newTransport(t, a, 1, TransportConfig{})
	got = call(ta2)
	<-tb.Consumer()
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err == nil || !strings.Contains(err.Error(), raft.ErrTransportShutdown.Error()) {
		t.Fatalf("call to a follower whose transport closed = %v, want its shutdown error", err)
	}
}

// TestAppendStreamFallsBack: a peer that refuses the append stream, as a
// build without it does, gets its AppendEntries over NetworkTransport, and
// a Raft group with such a node replicates.
func TestAppendStreamFallsBack(t *testing.T) {
	a := newMux(t, MuxConfig{})
	b := newMux(t, MuxConfig{})
	b.noAppendStream = true
	ta := newTransport(t, a, 1, TransportConfig{})
	tb := newTransport(t, b, 1, TransportConfig{})
	answering(t, tb)
	for i := range uint64(3) {
		req := &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: i, Entries: []*raft.Log{{Index: i + 1, Term: 1}}}
		var resp raft.AppendEntriesResponse
		if err := ta.AppendEntries("b", raft.ServerAddress(b.Addr().String()), req, &resp); err != nil {
			t.Fatalf("append %d to a peer without the append stream: %v", i, err)
		}
		if resp.LastLog != i+1 {
			t.Fatalf("append %d: LastLog %d", i, resp.LastLog)
		}
	}
	if got := liveStreams(a) + liveStreams(b); got != 0 {
		t.Fatalf("%d append streams to a peer that refuses them", got)
	}
}

// TestAppendStreamMixedCluster: a group whose nodes are one without the
// append stream and two with it elects a leader and replicates to all.
func TestAppendStreamMixedCluster(t *testing.T) {
	c := startMuxClusterWith(t, 3, []uint64{1, 2}, func(i int, m *Mux) { m.noAppendStream = i == 0 })
	want := c.applyAll("a", 50, -1)
	c.waitReplicated(want, 0, 1, 2)
}

// TestAppendRequestBound: the bound is never below the encoded length.
func TestAppendRequestBound(t *testing.T) {
	for _, r := range sampleAppendRequests() {
		if enc, bound := len(appendRequestFrame(nil, 1<<60, 1<<60, r)), appendRequestBound(r); bound < enc {
			t.Fatalf("bound %d below the encoding's %d bytes", bound, enc)
		}
	}
}

// streamTo is a's live append stream to b, or nil.
func streamTo(a, b *Mux) *appendClientConn {
	p := a.appendPeerFor(b.Addr().String())
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn
}

// TestAppendStreamSlowGroupKeepsTheStream: a follower group that never
// answers times its calls out, but while another group's answers keep
// coming the stream stays, and that group goes on; a stream on which
// nothing answers is replaced.
func TestAppendStreamSlowGroupKeepsTheStream(t *testing.T) {
	a, b := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	cfg := TransportConfig{Timeout: 300 * time.Millisecond}
	tr := map[string]*Transport{}
	for _, name := range []string{"a1", "a2", "b1", "b2"} {
		m, g := a, uint64(name[1]-'0')
		if name[0] == 'b' {
			m = b
		}
		x, err := NewTransport(m, g, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = x.Close() })
		tr[name] = x
	}
	done := make(chan struct{})
	var calls int
	var wg sync.WaitGroup
	wg.Go(func() { answerAppends(tr["b2"], done, &calls) })
	defer func() { close(done); wg.Wait() }()
	to := raft.ServerAddress(b.Addr().String())
	req := func() *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{Term: 1, PrevLogEntry: 1, Entries: []*raft.Log{{Index: 2, Term: 1}}}
	}
	var resp raft.AppendEntriesResponse
	if err := tr["a2"].AppendEntries("b", to, req(), &resp); err != nil {
		t.Fatal(err)
	}
	first := streamTo(a, b)

	slow := make(chan error, 1)
	go func() { slow <- tr["a1"].AppendEntries("b", to, req(), &resp) }() // b1 never answers
	var err error
	for ended := false; !ended; {
		select {
		case err = <-slow:
			ended = true
		default:
			var r raft.AppendEntriesResponse
			if e := tr["a2"].AppendEntries("b", to, req(), &r); e != nil {
				t.Fatalf("group 2 beside a group that does not answer: %v", e)
			}
		}
	}
	if err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("call to the group that does not answer = %v, want no answer", err)
	}
	if now := streamTo(a, b); now != first {
		t.Fatalf("the stream was replaced although group 2's answers kept coming")
	}

	// Now nothing answers at all: group 1 alone, the stream is replaced.
	go func() { <-tr["b1"].Consumer() }() // the call above left; take the next
	if err := tr["a1"].AppendEntries("b", to, req(), &resp); err == nil {
		t.Fatal("a call nobody answers succeeded")
	}
	if now := streamTo(a, b); now == first {
		t.Fatal("a stream on which nothing answered within the timeout was kept")
	}
	if err := tr["a2"].AppendEntries("b", to, req(), &resp); err != nil {
		t.Fatalf("group 2 on the new stream: %v", err)
	}
}

// TestAppendStreamLargeRequestTakesNetworkTransport: an AppendEntries
// larger than maxStreamedAppend goes over NetworkTransport, so that it
// holds no heartbeat back on the stream.
func TestAppendStreamLargeRequestTakesNetworkTransport(t *testing.T) {
	a, b := newMux(t, MuxConfig{}), newMux(t, MuxConfig{})
	ta := newTransport(t, a, 1, TransportConfig{})
	tb := newTransport(t, b, 1, TransportConfig{})
	answering(t, tb)
	big := &raft.AppendEntriesRequest{Term: 1, Entries: []*raft.Log{{Index: 1, Term: 1, Data: make([]byte, maxStreamedAppend)}}}
	var resp raft.AppendEntriesResponse
	if err := ta.AppendEntries("b", raft.ServerAddress(b.Addr().String()), big, &resp); err != nil || resp.LastLog != 1 {
		t.Fatalf("large AppendEntries = %+v, %v", resp, err)
	}
	if got := liveStreams(a); got != 0 {
		t.Fatalf("a large AppendEntries opened %d append streams, want it on NetworkTransport", got)
	}
}

// TestAppendStreamWaitForDialEndsAtClose: calls of a group waiting for
// another group's dial to a peer that never answers the header end when
// their transport closes.
func TestAppendStreamWaitForDialEndsAtClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent
		}
	}()
	a := newMux(t, MuxConfig{})
	dialer := newTransport(t, a, 1, TransportConfig{Timeout: 5 * time.Second})
	waiter := newTransport(t, a, 2, TransportConfig{Timeout: 5 * time.Second})
	to := raft.ServerAddress(ln.Addr().String())
	req := &raft.AppendEntriesRequest{Term: 1, Entries: []*raft.Log{{Index: 1, Term: 1}}}
	go func() {
		var resp raft.AppendEntriesResponse
		_ = dialer.AppendEntries("x", to, req, &resp)
	}()
	p := a.appendPeerFor(string(to))
	testwait.For(t, 5*time.Second, "a dial in progress", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.dialing != nil
	})
	got := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		got <- waiter.AppendEntries("x", to, req, &resp)
	}()
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, raft.ErrTransportShutdown) {
			t.Fatalf("call waiting for a dial, its transport closed = %v, want ErrTransportShutdown", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a call waiting for another group's dial did not end when its transport closed")
	}
}

// TestAppendStreamWaiterOnABrokenDial: a call that waited for another
// group's dial, which succeeded but whose stream broke (fail dropped it)
// before the call looked, gets an error, not a stream. It got neither, and
// the node crashed on the nil stream: seen once in CI, in cluster/gossip's
// tests.
func TestAppendStreamWaiterOnABrokenDial(t *testing.T) {
	a := newMux(t, MuxConfig{})
	p := a.appendPeerFor("127.0.0.1:1")
	p.mu.Lock()
	p.dialing, p.dialErr, p.conn = nil, nil, nil // the dial ended well; its stream is gone
	p.mu.Unlock()
	cc, err := p.dialed()
	if cc != nil || !errors.Is(err, ErrDial) {
		t.Fatalf("a waiter on a dial whose stream broke: %v, %v; want no stream and ErrDial", cc, err)
	}
}
