package gridtest

import (
	"net"
	"sync"
)

// clientPort is the fault on a test node's client port (Cluster.CutClientPort):
// while cut, the connections it accepted are closed and new ones are
// closed as soon as they are accepted. It outlives the node's restarts;
// each start wraps its new listener with it.
type clientPort struct {
	mu    sync.Mutex
	isCut bool
	conns map[*portConn]struct{}
}

// wrap is node.TestingKnobs.WrapListener.
func (p *clientPort) wrap(l net.Listener) net.Listener { return &portListener{Listener: l, port: p} }

func (p *clientPort) cut() {
	p.mu.Lock()
	p.isCut = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

func (p *clientPort) heal() {
	p.mu.Lock()
	p.isCut = false
	p.mu.Unlock()
}

// admit tracks c, or reports false while the port is cut.
func (p *clientPort) admit(c *portConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isCut {
		return false
	}
	if p.conns == nil {
		p.conns = map[*portConn]struct{}{}
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *clientPort) forget(c *portConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

type portListener struct {
	net.Listener
	port *clientPort
}

func (l *portListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &portConn{Conn: conn, port: l.port}
		if l.port.admit(c) {
			return c, nil
		}
		_ = conn.Close()
	}
}

type portConn struct {
	net.Conn
	port *clientPort
}

func (c *portConn) Close() error {
	c.port.forget(c)
	return c.Conn.Close()
}
