package raftlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The append stream: one connection from a node to each peer carries the
// AppendEntries (heartbeats included) of every group the node leads there,
// and their answers come back on it. Calls are told apart by an id, so
// the groups' calls are in flight at once; frames that wait to be written
// together go out in one write (frameWriter), requests of several groups
// and answers alike. The frames are a compact binary encoding
// (appendcodec.go) instead of NetworkTransport's msgpack. Every other RPC
// (votes, snapshots, TimeoutNow) stays on the group's NetworkTransport.
//
// The dialer writes a muxVersionAppend header; the accepting Mux answers
// with appendStreamAck before any frame. A peer that closes the connection
// instead is a build without the append stream: for appendRefusedFor the
// dialer's groups send their AppendEntries to it over NetworkTransport, as
// that build expects.
const (
	appendStreamAck byte = 0xA1
	// appendRefusedFor is how long a peer that refused the append stream
	// gets NetworkTransport's AppendEntries before the stream is tried again.
	appendRefusedFor = 10 * time.Second
	appendReadBuffer = 64 << 10
	// keptFrameBuffer is the largest frame buffer a stream keeps between
	// frames; a larger one (a catch-up) is dropped after its frame.
	keptFrameBuffer = 1 << 20
)

// errAppendRefused reports a peer that does not speak the append stream.
var errAppendRefused = errors.New("raftlog: peer refused the append stream")

// frameWriter writes frames to a connection for many goroutines. A frame is
// appended to a pending buffer; the goroutine that finds no write in
// progress writes the buffer, and whatever was appended meanwhile, in as
// few writes as it takes, each under a deadline of timeout. The first
// write error is kept and returned to every later write, and broken is
// called with it once (the owner closes the connection).
type frameWriter struct {
	conn    net.Conn
	timeout time.Duration
	broken  func(error)

	mu      sync.Mutex
	pending []byte
	spare   []byte
	writing bool
	err     error
}

// write appends a frame (built by frame on the end of the buffer it is
// given) and, unless another goroutine is writing, writes everything
// pending. A nil error means the frame was queued, not that it was sent:
// a write that fails later shows as a broken connection.
func (w *frameWriter) write(frame func(dst []byte) []byte) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.pending = frame(w.pending)
	if w.writing {
		w.mu.Unlock()
		return nil
	}
	w.writing = true
	for len(w.pending) > 0 && w.err == nil {
		out := w.pending
		w.pending = w.spare[:0]
		w.mu.Unlock()
		_ = w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
		_, err := w.conn.Write(out)
		w.mu.Lock()
		if cap(out) <= keptFrameBuffer {
			w.spare = out[:0]
		} else {
			w.spare = nil
		}
		if err != nil {
			w.err = err
			w.pending = nil
		}
	}
	w.writing = false
	err := w.err
	w.mu.Unlock()
	if err != nil {
		w.broken(err)
	}
	return err
}

// readFrame reads one frame into buf (grown as needed) and decodes it; a
// frame of another kind than want is a corrupt stream.
func readFrame(r *bufio.Reader, buf []byte, want byte) (appendFrame, []byte, error) {
	var lenBuf [frameLenSize]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return appendFrame{}, buf, err
	}
	n := binary.BigEndian.Uint32(lenBuf[:])
	if n > maxAppendFrame {
		return appendFrame{}, buf, fmt.Errorf("%w: append frame of %d bytes, more than %d", ErrCorrupt, n, maxAppendFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return appendFrame{}, buf, err
	}
	f, err := decodeAppendFrame(buf) // copies what it keeps
	if cap(buf) > keptFrameBuffer {
		buf = nil
	}
	if err == nil && f.kind != want {
		err = fmt.Errorf("%w: append frame of kind %d, want %d", ErrCorrupt, f.kind, want)
	}
	return f, buf, err
}

// appendResult is the answer to one call on an append stream.
type appendResult struct {
	resp   *raft.AppendEntriesResponse
	errMsg string // the follower's error
	err    error  // the stream broke
}

// appendPeer is the append stream to one peer, shared by the groups.
type appendPeer struct {
	mux    *Mux
	target string

	mu        sync.Mutex
	conn      *appendClientConn
	dialing   chan struct{} // closed when the dial in progress ends; nil: none
	dialErr   error         // the last dial's error
	refusedAt time.Time
}

// appendClientConn is one dialed append stream.
type appendClientConn struct {
	peer *appendPeer
	tc   *trackedConn
	w    frameWriter
	// lastRead is when the stream last read an answer (UnixNano): a call
	// that times out while answers still come is one group's slow
	// follower, not a dead stream.
	lastRead atomic.Int64

	mu     sync.Mutex
	calls  map[uint64]chan appendResult
	nextID uint64
	err    error // set when broken
}

// call sends an AppendEntries of group and waits for its answer, at most
// timeout (the dial included) or until stop closes.
func (p *appendPeer) call(group uint64, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, timeout time.Duration, stop <-chan struct{}) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	cc, err := p.connect(timeout, timer.C, stop)
	if err != nil {
		return err
	}
	id, ch, err := cc.register()
	if err != nil {
		return err
	}
	sent := time.Now().UnixNano()
	if err := cc.w.write(func(dst []byte) []byte { return appendRequestFrame(dst, id, group, args) }); err != nil {
		return err
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return r.err
		}
		if r.errMsg != "" {
			return errors.New(r.errMsg)
		}
		*resp = *r.resp
		return nil
	case <-timer.C:
		cc.forget(id)
		err := fmt.Errorf("%w: %s: no answer to AppendEntries of group %d within %v", ErrDial, p.target, group, timeout)
		if cc.lastRead.Load() < sent {
			// Nothing came back since: the stream is stuck for every
			// group, start over on a new connection.
			cc.fail(err)
		}
		return err
	case <-stop:
		cc.forget(id)
		return raft.ErrTransportShutdown
	}
}

// connect returns the live stream to the peer, dialing one if there is
// none; the groups' calls wait for one dial, each until expired or stop.
// It returns errAppendRefused while the peer is known not to speak the
// append stream.
func (p *appendPeer) connect(timeout time.Duration, expired <-chan time.Time, stop <-chan struct{}) (*appendClientConn, error) {
	p.mu.Lock()
	if p.conn != nil {
		cc := p.conn
		p.mu.Unlock()
		return cc, nil
	}
	if !p.refusedAt.IsZero() && time.Since(p.refusedAt) < appendRefusedFor {
		p.mu.Unlock()
		return nil, errAppendRefused
	}
	if ch := p.dialing; ch != nil {
		p.mu.Unlock()
		select {
		case <-ch:
		case <-expired:
			return nil, fmt.Errorf("%w: %s (append stream): dial not done within %v", ErrDial, p.target, timeout)
		case <-stop:
			return nil, raft.ErrTransportShutdown
		}
		return p.dialed()
	}
	ch := make(chan struct{})
	p.dialing = ch
	p.mu.Unlock()

	cc, err := p.dial(timeout)
	p.mu.Lock()
	p.dialing, p.dialErr = nil, err
	if err == nil {
		p.conn = cc
	} else if errors.Is(err, errAppendRefused) {
		p.refusedAt = time.Now()
	}
	p.mu.Unlock()
	close(ch)
	return cc, err
}

// dialed is what a call that waited for another call's dial gets: the
// stream it made, or its error. The stream may have broken (and been
// dropped) already: then an error too, and the next call dials again.
func (p *appendPeer) dialed() (*appendClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.conn != nil:
		return p.conn, nil
	case p.dialErr != nil:
		return nil, p.dialErr
	}
	return nil, fmt.Errorf("%w: %s (append stream): broke right after it was dialed", ErrDial, p.target)
}

// dial opens a stream to the peer: the header, then the peer's
// acknowledgement, or errAppendRefused if it closes the connection instead.
func (p *appendPeer) dial(timeout time.Duration) (*appendClientConn, error) {
	raw, err := p.mux.dial(p.target, timeout, header{append: true}, "append stream")
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = p.mux.headerTimeout
	}
	_ = raw.SetReadDeadline(time.Now().Add(timeout))
	var ack [1]byte
	_, err = io.ReadFull(raw, ack[:])
	_ = raw.SetReadDeadline(time.Time{})
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		_ = raw.Close()
		return nil, fmt.Errorf("%w: %s (append stream): no answer to the header: %w", ErrDial, p.target, err)
	case err != nil || ack[0] != appendStreamAck:
		_ = raw.Close()
		return nil, errAppendRefused
	}
	cc := &appendClientConn{peer: p, calls: make(map[uint64]chan appendResult)}
	cc.tc, err = p.mux.trackAppend(raw, p.target)
	if err != nil {
		return nil, err
	}
	cc.w = frameWriter{conn: cc.tc, timeout: timeout, broken: cc.fail}
	if !p.mux.goAppend(cc.readLoop) {
		_ = cc.tc.Close()
		return nil, ErrMuxClosed
	}
	return cc, nil
}

// register allocates a call id and the channel its answer comes on.
func (cc *appendClientConn) register() (uint64, chan appendResult, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil {
		return 0, nil, cc.err
	}
	cc.nextID++
	ch := make(chan appendResult, 1)
	cc.calls[cc.nextID] = ch
	return cc.nextID, ch, nil
}

// forget drops a call whose caller stopped waiting.
func (cc *appendClientConn) forget(id uint64) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	delete(cc.calls, id)
}

// deliver hands an answer to its call, if the caller still waits.
func (cc *appendClientConn) deliver(id uint64, r appendResult) {
	cc.mu.Lock()
	ch, ok := cc.calls[id]
	delete(cc.calls, id)
	cc.mu.Unlock()
	if ok {
		ch <- r
	}
}

// fail breaks the stream: it is closed, every waiting call gets err, and
// the peer dials a new one for the next call.
func (cc *appendClientConn) fail(err error) {
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	cc.err = err
	calls := cc.calls
	cc.calls = nil
	cc.mu.Unlock()
	_ = cc.tc.Close()
	for _, ch := range calls {
		ch <- appendResult{err: err}
	}
	p := cc.peer
	p.mu.Lock()
	if p.conn == cc {
		p.conn = nil
	}
	p.mu.Unlock()
}

// readLoop reads answers until the stream breaks.
func (cc *appendClientConn) readLoop() {
	r := bufio.NewReaderSize(cc.tc, appendReadBuffer)
	var buf []byte
	for {
		f, b, err := readFrame(r, buf, frameAppendResponse)
		buf = b
		if err != nil {
			cc.fail(fmt.Errorf("%w: %s (append stream): %w", ErrDial, cc.peer.target, err))
			return
		}
		cc.lastRead.Store(time.Now().UnixNano())
		cc.deliver(f.call, appendResult{resp: f.resp, errMsg: f.errMsg})
	}
}

// serveAppendStream answers the append stream a peer dialed: each request
// goes to its group's Transport, in a goroutine of its own so that a group
// whose Raft is busy delays no other group, and each answer is written when
// it is ready.
func (m *Mux) serveAppendStream(c *trackedConn) {
	defer c.Close()
	w := &frameWriter{conn: c, timeout: defaultTransportTimeout, broken: func(error) { _ = c.Close() }}
	if _, err := c.Write([]byte{appendStreamAck}); err != nil {
		return
	}
	r := bufio.NewReaderSize(c, appendReadBuffer)
	var buf []byte
	for {
		f, b, err := readFrame(r, buf, frameAppendRequest)
		buf = b
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !m.isClosed() {
				m.log.Warn("raftlog: append stream closed", "addr", m.addr.String(), "peer", c.peer, "error", err)
			}
			return
		}
		t := m.appendTarget(f.group)
		if t == nil {
			msg := fmt.Sprintf("raftlog: group %d is not served by %s", f.group, m.addr)
			_ = w.write(func(dst []byte) []byte {
				return appendResponseFrame(dst, f.call, msg, &raft.AppendEntriesResponse{})
			})
			continue
		}
		if !m.goAppend(func() { t.serveAppend(f, w, c.closed) }) {
			return
		}
	}
}

// trackAppend tracks raw, an append stream with peer, for Faults and for
// Close.
func (m *Mux) trackAppend(raw net.Conn, peer string) (*trackedConn, error) {
	c := newTrackedConn(raw, peer, m.faults, m.untrackAppend)
	if !m.faults.track(peer, c) {
		_ = raw.Close()
		return nil, fmt.Errorf("%w: %s (append stream)", ErrPeerBlocked, peer)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		_ = c.Close()
		return nil, ErrMuxClosed
	}
	m.appendConns[c] = struct{}{}
	m.mu.Unlock()
	return c, nil
}

func (m *Mux) untrackAppend(c *trackedConn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.appendConns, c)
}

// goAppend runs f in a goroutine that Close waits for, unless the Mux is
// closed.
func (m *Mux) goAppend(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// appendPeerFor returns the append stream to target, created on first use.
func (m *Mux) appendPeerFor(target string) *appendPeer {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.appendPeers[target]
	if p == nil {
		p = &appendPeer{mux: m, target: target}
		m.appendPeers[target] = p
	}
	return p
}

// serveAppends makes t the Transport answering group's AppendEntries.
func (m *Mux) serveAppends(group uint64, t *Transport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.appendTargets[group] = t
}

// stopServingAppends forgets t as group's Transport, unless another took
// its place.
func (m *Mux) stopServingAppends(group uint64, t *Transport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.appendTargets[group] == t {
		delete(m.appendTargets, group)
	}
}

// appendTarget is the Transport serving group's AppendEntries, or nil.
func (m *Mux) appendTarget(group uint64) *Transport {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.appendTargets[group]
}
