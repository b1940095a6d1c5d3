package raftlog

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// layer is the raft.StreamLayer of one group on a Mux. Accept returns the
// connections the Mux routed to the group; Dial opens a connection to a
// peer's Mux and names the group in its header. The layer tracks every live
// connection it dialed or accepted and closes them all in Close, so that a
// closed raft.NetworkTransport leaves no connection (and no handler
// goroutine blocked on one) behind.
type layer struct {
	mux      *Mux
	group    uint64
	acceptCh chan net.Conn
	done     chan struct{}
	once     sync.Once

	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
}

var _ raft.StreamLayer = (*layer)(nil)

func newLayer(m *Mux, group uint64) *layer {
	return &layer{
		mux:      m,
		group:    group,
		acceptCh: make(chan net.Conn),
		done:     make(chan struct{}),
		conns:    make(map[*trackedConn]struct{}),
	}
}

// Accept waits for the next connection routed to the group. After Close it
// returns an error wrapping ErrLayerClosed and net.ErrClosed.
func (l *layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.acceptCh:
		return c, nil
	case <-l.done:
		return nil, l.closedErr()
	}
}

// Addr is the Mux's advertised address, the address peers dial.
func (l *layer) Addr() net.Addr { return l.mux.Addr() }

// Close unregisters the group from the Mux, makes Accept and Dial fail and
// closes every live connection of the group. It is idempotent.
func (l *layer) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		conns := l.conns
		l.conns = nil
		l.mu.Unlock()
		close(l.done)
		l.mux.unregister(l)
		for c := range conns {
			_ = c.Close()
		}
	})
	return nil
}

// Dial connects to the Mux at address and writes the header that routes the
// connection to this group on the other side.
func (l *layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if l.isClosed() {
		return nil, l.closedErr()
	}
	raw, err := l.mux.dial(string(address), timeout, header{group: l.group}, fmt.Sprintf("group %d", l.group))
	if err != nil {
		return nil, err
	}
	return l.adopt(raw, string(address))
}

// adopt tracks raw as a live connection of the group with peer. If the peer
// is blocked or the layer is closed it closes raw and returns an error.
func (l *layer) adopt(raw net.Conn, peer string) (*trackedConn, error) {
	c := newTrackedConn(raw, peer, l.mux.faults, l.untrack)
	if !l.mux.faults.track(peer, c) {
		_ = raw.Close()
		return nil, fmt.Errorf("%w: %s (group %d)", ErrPeerBlocked, peer, l.group)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = c.Close()
		return nil, l.closedErr()
	}
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	return c, nil
}

// deliver hands an adopted connection to Accept. It returns false, having
// closed c, if the layer closes first.
func (l *layer) deliver(c *trackedConn) bool {
	select {
	case l.acceptCh <- c:
		return true
	case <-l.done:
		_ = c.Close()
		return false
	}
}

func (l *layer) untrack(c *trackedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
}

func (l *layer) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *layer) closedErr() error {
	return fmt.Errorf("%w (group %d): %w", ErrLayerClosed, l.group, net.ErrClosed)
}

// trackedConn is a live connection of a layer or of an append stream.
// Closing it, by whoever, removes it from its owner's and the Faults'
// tables. Its Read and Write honour Faults.Pause.
type trackedConn struct {
	net.Conn
	peer   string
	faults *Faults
	forget func(*trackedConn) // removes it from its owner's table
	closed chan struct{}
	once   sync.Once
	err    error
}

func newTrackedConn(raw net.Conn, peer string, f *Faults, forget func(*trackedConn)) *trackedConn {
	return &trackedConn{Conn: raw, peer: peer, faults: f, forget: forget, closed: make(chan struct{})}
}

// Read holds back what it read while the Mux is paused.
func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.faults.wait(c.closed) {
		return 0, net.ErrClosed
	}
	return n, err
}

// Write waits while the Mux is paused.
func (c *trackedConn) Write(b []byte) (int, error) {
	if !c.faults.wait(c.closed) {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(b)
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.err = c.Conn.Close()
		c.faults.untrack(c.peer, c)
		c.forget(c)
	})
	return c.err
}
