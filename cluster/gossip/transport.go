package gossip

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// transport is memberlist's NetTransport behind a guard: every UDP
// packet and the first message read from every TCP stream, accepted or
// dialed, is checked (checkPacket, checkStream) before memberlist decodes
// it, and a refused one is dropped, its stream closed, logged at warn and
// counted. It also injects the test faults of a Faults.
type transport struct {
	nt      *memberlist.NetTransport
	faults  *Faults
	crypto  *cryptoGuard // nil: plaintext gossip
	logger  *slog.Logger
	refused atomic.Uint64

	packets chan *memberlist.Packet
	streams chan net.Conn
	stop    chan struct{} // closed first by Shutdown: deliver nothing more
	dead    chan struct{} // closed once the NetTransport has shut down
	// sending is read-held around each packet written; Shutdown sets down
	// under it before it closes the sockets, so that no write meets them
	// closed.
	sending sync.RWMutex
	down    bool
	once    sync.Once
	wg      sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// errCut: a stream dial refused by Faults.
var errCut = errors.New("gossip: peer cut off (fault injection)")

// newTransport listens on ip:port (TCP and UDP; port 0 picks one
// port free for both, with a few tries, as memberlist does).
func newTransport(ip string, port int, faults *Faults, crypto *cryptoGuard, logger *slog.Logger, mlog *log.Logger) (*transport, error) {
	tries := 1
	if port == 0 {
		tries = 10
	}
	var nt *memberlist.NetTransport
	var err error
	for range tries {
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{ip}, BindPort: port, Logger: mlog})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	t := &transport{
		nt: nt, faults: faults, crypto: crypto, logger: logger,
		packets: make(chan *memberlist.Packet), streams: make(chan net.Conn),
		stop: make(chan struct{}), dead: make(chan struct{}),
	}
	t.wg.Add(2)
	go t.forwardPackets()
	go t.forwardStreams()
	return t, nil
}

// Port is the bound port.
func (t *transport) Port() int { return t.nt.GetAutoBindPort() }

// Refused counts the packets and stream messages refused so far.
func (t *transport) Refused() uint64 { return t.refused.Load() }

func (t *transport) refuse(err error, from net.Addr) {
	t.refused.Add(1)
	t.logger.Warn("gossip: frame refused", "from", from.String(), "err", err)
}

func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.nt.FinalAdvertiseAddr(ip, port)
}

func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.send(addr, func() (time.Time, error) { return t.nt.WriteTo(b, addr) })
}

func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.send(a.Addr, func() (time.Time, error) { return t.nt.WriteToAddress(b, a) })
}

// send writes one packet to addr, or drops it (as UDP may lose it) when
// Faults drop it or once Shutdown has begun. memberlist shuts its transport
// down before it stops its own gossip and probes, so at every clean stop a
// probe or gossip round wrote to the closed socket and memberlist logged
// the "use of closed network connection" as an error.
func (t *transport) send(addr string, write func() (time.Time, error)) (time.Time, error) {
	t.sending.RLock()
	defer t.sending.RUnlock()
	if t.down || t.faults.dropsPacket(addr) {
		return time.Now(), nil
	}
	return write()
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.faults.refusesDial(a.Addr) {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errCut)
	}
	c, err := t.nt.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &checkedConn{Conn: c, t: t}, nil
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown stops delivering and sending, then shuts the NetTransport
// down; the forwarders keep draining it until it has (its listeners block
// on unbuffered channels).
func (t *transport) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.stop)
		t.sending.Lock()
		t.down = true
		t.sending.Unlock()
		err = t.nt.Shutdown()
		close(t.dead)
		t.wg.Wait()
	})
	return err
}

func (t *transport) forwardPackets() {
	defer t.wg.Done()
	for {
		var p *memberlist.Packet
		select {
		case p = <-t.nt.PacketCh():
		case <-t.dead:
			return
		}
		if t.faults.dropsPacket(p.From.String()) {
			continue
		}
		check := checkPacket
		if t.crypto != nil {
			check = t.crypto.checkPacket
		}
		if err := check(p.Buf); err != nil {
			t.refuse(err, p.From)
			continue
		}
		select {
		case t.packets <- p:
		case <-t.stop:
		}
	}
}

func (t *transport) forwardStreams() {
	defer t.wg.Done()
	for {
		var c net.Conn
		select {
		case c = <-t.nt.StreamCh():
		case <-t.dead:
			return
		}
		if t.faults.refusesAccept() {
			_ = c.Close()
			continue
		}
		select {
		case t.streams <- &checkedConn{Conn: c, t: t}:
		case <-t.stop:
			_ = c.Close()
		}
	}
}

// checkedConn checks the first message read from a stream before handing
// its bytes on: memberlist reads one message a stream in each direction,
// and sets the deadline that bounds the check. Like a net.Conn, it is read
// from one goroutine at a time.
type checkedConn struct {
	net.Conn
	t       *transport
	checked bool
	pending []byte // read by the check, not yet handed on
	err     error  // the check's failure, returned once pending is out
}

func (c *checkedConn) Read(p []byte) (int, error) {
	if !c.checked {
		c.checked = true
		rec := &capReader{r: c.Conn, left: maxGossipStream}
		err := checkStreamWith(rec, c.t.crypto)
		c.pending = rec.buf
		switch {
		case rec.over:
			err = refuse("stream message longer than %d bytes", maxGossipStream)
			fallthrough
		case errors.Is(err, ErrFrame):
			c.t.refuse(err, c.Conn.RemoteAddr())
			_ = c.Conn.Close()
			c.pending, c.err = nil, err
		case err != nil && !(errors.Is(err, io.EOF) && len(c.pending) == 0):
			c.pending, c.err = nil, err // a read failed: the message is lost anyway
		}
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}

// capReader records what it reads and refuses to read past left bytes.
type capReader struct {
	r    io.Reader
	left int
	buf  []byte
	over bool // a read past left was refused
}

func (r *capReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		r.over = true
		return 0, refuse("stream message longer than %d bytes", maxGossipStream)
	}
	if len(p) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	r.left -= n
	r.buf = append(r.buf, p[:n]...)
	return n, err
}
