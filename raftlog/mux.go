package raftlog

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Transport errors. Returned errors wrap one of these (test with errors.Is).
var (
	// ErrMuxClosed is returned by Mux.Layer after Mux.Close.
	ErrMuxClosed = errors.New("raftlog: mux closed")
	// ErrLayerClosed is returned by Accept and Dial of a closed stream
	// layer; such errors also wrap net.ErrClosed.
	ErrLayerClosed = errors.New("raftlog: stream layer closed")
	// ErrGroupRegistered is returned by Mux.Layer for a group that already
	// has an open layer on the Mux.
	ErrGroupRegistered = errors.New("raftlog: group already registered")
	// ErrBadHeader reports a connection header that cannot be decoded.
	ErrBadHeader = errors.New("raftlog: bad mux header")
	// ErrPeerBlocked is returned by Dial to a peer blocked by Faults.
	ErrPeerBlocked = errors.New("raftlog: peer blocked by fault injection")
	// ErrDial wraps the network error of a failed Dial.
	ErrDial = errors.New("raftlog: dial failed")
)

// DefaultHeaderTimeout is MuxConfig.HeaderTimeout when it is zero.
const DefaultHeaderTimeout = 5 * time.Second

// MuxConfig configures a Mux. The zero value is valid.
type MuxConfig struct {
	// Advertise is the address peers dial to reach this Mux, written in the
	// header of every connection this Mux dials so that the other side
	// knows who it talks to. Empty means the listener's address, which must
	// then not be a wildcard such as 0.0.0.0.
	Advertise string
	// HeaderTimeout bounds the time an accepted connection has to send its
	// header. Zero means DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// Faults, if not nil, injects network faults (tests only).
	Faults *Faults
	// Logger receives refused connections and accept errors. Nil discards.
	Logger *slog.Logger
	// TLSServer, when set, secures accepted connections (the handshake
	// runs before the header is read, within HeaderTimeout), and TLSClient
	// the connections this Mux dials; its ServerName defaults to the host
	// dialled. Set both or neither.
	TLSServer, TLSClient *tls.Config
}

// withDefaults is c with every unset field at its default.
func (c MuxConfig) withDefaults() MuxConfig {
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports whether c, with its defaults, is usable, wrapping
// ErrInvalidOptions if not.
func (c MuxConfig) Validate() error {
	c = c.withDefaults()
	if c.HeaderTimeout < 0 {
		return fmt.Errorf("%w: negative HeaderTimeout %v", ErrInvalidOptions, c.HeaderTimeout)
	}
	if c.Advertise != "" {
		if err := checkAddr(c.Advertise); err != nil {
			return fmt.Errorf("%w: Advertise: %w", ErrInvalidOptions, err)
		}
	}
	if (c.TLSServer == nil) != (c.TLSClient == nil) {
		return fmt.Errorf("%w: TLS needs both a server and a client configuration", ErrInvalidOptions)
	}
	return nil
}

// Mux shares one listener among the Raft groups of a node. See the package
// documentation.
type Mux struct {
	ln            net.Listener
	addr          advertisedAddr
	headerTimeout time.Duration
	tlsServer     *tls.Config // nil: plaintext
	tlsClient     *tls.Config
	faults        *Faults
	log           *slog.Logger
	done          chan struct{}
	stopping      atomic.Bool // see MarkStopping
	wg            sync.WaitGroup
	closeOnce     sync.Once
	closeErr      error

	mu      sync.Mutex
	closed  bool
	layers  map[uint64]*layer
	pending map[net.Conn]struct{} // accepted, header not read yet
	// The append streams (appendstream.go): the groups' transports that
	// answer AppendEntries, the stream to each peer, and every live stream
	// connection, dialed or accepted.
	appendTargets map[uint64]*Transport
	appendPeers   map[string]*appendPeer
	appendConns   map[*trackedConn]struct{}
	// noAppendStream makes the Mux refuse append streams as a build without
	// them does (tests of the fallback).
	noAppendStream bool
}

// ListenMux listens on addr ("host:port"; port 0 picks a free one) and
// returns a Mux serving it.
func ListenMux(addr string, cfg MuxConfig) (*Mux, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raftlog: listen %s: %w", addr, err)
	}
	m, err := NewMux(ln, cfg)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	return m, nil
}

// NewMux returns a Mux that accepts connections on ln until Close, which
// also closes ln. On error ln is left open.
func NewMux(ln net.Listener, cfg MuxConfig) (*Mux, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	addr := cfg.Advertise
	if addr == "" {
		addr = ln.Addr().String()
		if err := checkAddr(addr); err != nil {
			return nil, fmt.Errorf("%w: listener address: %w", ErrInvalidOptions, err)
		}
		if host, _, _ := net.SplitHostPort(addr); net.ParseIP(host).IsUnspecified() {
			return nil, fmt.Errorf("%w: listening on %s needs an Advertise address", ErrInvalidOptions, addr)
		}
	}
	m := &Mux{
		ln:            ln,
		addr:          advertisedAddr(addr),
		headerTimeout: cfg.HeaderTimeout,
		tlsServer:     cfg.TLSServer,
		tlsClient:     cfg.TLSClient,
		faults:        cfg.Faults,
		log:           cfg.Logger,
		done:          make(chan struct{}),
		layers:        make(map[uint64]*layer),
		pending:       make(map[net.Conn]struct{}),
		appendTargets: make(map[uint64]*Transport),
		appendPeers:   make(map[string]*appendPeer),
		appendConns:   make(map[*trackedConn]struct{}),
	}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// Addr is the advertised address of the Mux: the address its peers dial.
func (m *Mux) Addr() net.Addr { return m.addr }

// Layer registers group on the Mux and returns its stream layer, on which
// raft.NewNetworkTransportWithConfig (or NewTransport) runs. Connections
// whose header names the group are handed to the layer's Accept. Closing
// the layer unregisters the group, after which it may be registered again.
func (m *Mux) Layer(group uint64) (raft.StreamLayer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrMuxClosed
	}
	if _, ok := m.layers[group]; ok {
		return nil, fmt.Errorf("%w: group %d", ErrGroupRegistered, group)
	}
	l := newLayer(m, group)
	m.layers[group] = l
	return l, nil
}

// MarkStopping records that the node is stopping on purpose: from now on
// its Raft groups expect their peers to become unreachable (they stop too
// when the whole cluster does), and the loggers given Stopping log Raft's
// complaints about peers at info (RaftLogger). The Mux itself goes on
// serving until Close. A node calls it first thing in its stop.
func (m *Mux) MarkStopping() { m.stopping.Store(true) }

// Stopping reports whether MarkStopping was called.
func (m *Mux) Stopping() bool { return m.stopping.Load() }

// Close closes the listener, every layer and every connection, and waits
// for the Mux's goroutines to exit. It is idempotent and returns the
// listener's close error. Close the transports running on the layers
// first: a raft.NetworkTransport whose layer is closed under it keeps
// retrying Accept, with backoff, until it is closed itself.
func (m *Mux) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		layers := make([]*layer, 0, len(m.layers))
		for _, l := range m.layers {
			layers = append(layers, l)
		}
		pending := m.pending
		m.pending = nil
		streams := make([]*trackedConn, 0, len(m.appendConns))
		for c := range m.appendConns {
			streams = append(streams, c)
		}
		m.mu.Unlock()

		close(m.done)
		m.closeErr = m.ln.Close()
		for c := range pending {
			_ = c.Close()
		}
		for _, c := range streams {
			_ = c.Close()
		}
		for _, l := range layers {
			_ = l.Close()
		}
		m.wg.Wait()
	})
	return m.closeErr
}

// acceptLoop accepts connections and reads each header in its own
// goroutine, so that a slow or silent client delays nobody else.
func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var delay time.Duration
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.log.Warn("raftlog: mux accept failed", "addr", m.addr.String(), "error", err, "retry_in", delay)
			select {
			case <-m.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		if m.tlsServer != nil {
			// The handshake runs on the header's first read, under its
			// deadline: a peer without a valid certificate is refused
			// before it can name a group.
			conn = tls.Server(conn, m.tlsServer)
		}
		if !m.addPending(conn) {
			_ = conn.Close()
			return
		}
		go m.route(conn)
	}
}

// addPending records conn as waiting for its header and counts its
// goroutine in m.wg, unless the Mux is closed.
func (m *Mux) addPending(conn net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.pending[conn] = struct{}{}
	m.wg.Add(1)
	return true
}

// route reads conn's header and hands conn to its group's layer, or serves
// it as an append stream, or closes it: bad or late header, unknown group
// (the node may not host the group yet; raft will retry), blocked peer, or
// closed layer.
func (m *Mux) route(conn net.Conn) {
	defer m.wg.Done()
	remote := conn.RemoteAddr().String()
	_ = conn.SetReadDeadline(time.Now().Add(m.headerTimeout))
	h, err := readHeader(conn)
	m.mu.Lock()
	delete(m.pending, conn)
	var l *layer
	if err == nil && !h.append {
		l = m.layers[h.group]
	}
	refuseAppend := m.noAppendStream
	m.mu.Unlock()
	if err == nil && h.append && refuseAppend {
		err = fmt.Errorf("%w: unknown version %d", ErrBadHeader, muxVersionAppend)
	}
	if err != nil {
		_ = conn.Close()
		if !m.isClosed() {
			m.log.Warn("raftlog: mux refused connection", "addr", m.addr.String(), "remote", remote, "error", err)
		}
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	if h.append {
		c, err := m.trackAppend(conn, h.addr)
		if err != nil {
			m.log.Debug("raftlog: mux refused connection", "addr", m.addr.String(), "peer", h.addr, "error", err)
			return
		}
		m.serveAppendStream(c)
		return
	}
	if l == nil {
		_ = conn.Close()
		m.log.Debug("raftlog: mux refused connection for unknown group",
			"addr", m.addr.String(), "peer", h.addr, "group", h.group)
		return
	}
	c, err := l.adopt(conn, h.addr)
	if err != nil {
		m.log.Debug("raftlog: mux refused connection", "addr", m.addr.String(), "peer", h.addr, "error", err)
		return
	}
	l.deliver(c)
}

// dial connects to the Mux at target (TLS when configured) and writes h,
// which names this Mux's advertised address; what names the connection in
// errors. Every error wraps ErrDial or ErrPeerBlocked.
func (m *Mux) dial(target string, timeout time.Duration, h header, what string) (net.Conn, error) {
	if m.faults.Blocked(target) {
		return nil, fmt.Errorf("%w: dial %s (%s)", ErrPeerBlocked, target, what)
	}
	d := net.Dialer{Timeout: timeout}
	raw, err := d.Dial("tcp", target)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%s): %w", ErrDial, target, what, err)
	}
	if timeout <= 0 {
		timeout = m.headerTimeout
	}
	if m.tlsClient != nil {
		c := m.tlsClient.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(target)
		}
		tc := tls.Client(raw, c)
		_ = tc.SetDeadline(time.Now().Add(timeout))
		if err := tc.Handshake(); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("%w: %s (%s): TLS: %w", ErrDial, target, what, err)
		}
		_ = tc.SetDeadline(time.Time{})
		raw = tc
	}
	h.addr = m.addr.String()
	hdr := appendHeader(make([]byte, 0, MaxHeaderLen), h)
	_ = raw.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := raw.Write(hdr); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("%w: %s (%s): header: %w", ErrDial, target, what, err)
	}
	_ = raw.SetWriteDeadline(time.Time{})
	return raw, nil
}

// unregister removes l from the Mux if it is still the group's layer.
func (m *Mux) unregister(l *layer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.layers[l.group] == l {
		delete(m.layers, l.group)
	}
}

func (m *Mux) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// advertisedAddr is a Mux's advertised address as a net.Addr.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }
