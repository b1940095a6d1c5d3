package cluster

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/l4xg/grid/cluster/topology"
)

// DefaultGossipAddr is where a node gossips unless told otherwise.
const DefaultGossipAddr = "127.0.0.1:7422"

// MembershipConfig configures a node's gossip membership. The zero value of
// every field but NodeID is a working default.
type MembershipConfig struct {
	NodeID topology.NodeID // required; the memberlist node name
	// BindAddr is ip:port to listen on (TCP and UDP); port 0 picks a free
	// port, which is then advertised. Default DefaultGossipAddr.
	BindAddr string
	// AdvertiseAddr is the ip:port other nodes reach this one on.
	// Default: the bound address (for 0.0.0.0, a private address of the
	// host, chosen by memberlist).
	AdvertiseAddr string
	// Meta is gossiped as node metadata; an empty Meta.ID means NodeID.
	Meta   topology.NodeMeta
	Logger *slog.Logger
	// OnEvent, if set, receives every join, update and leave, in order,
	// from one goroutine that never holds a gossip lock. Events are hints
	// to look again: Members is the state. Events queued when Shutdown is
	// called are dropped.
	OnEvent func(Event)
	// Clock stamps Member.Since. Default time.Now.
	Clock  func() time.Time
	Timing GossipTiming
	// Seeds are gossip addresses (host:port; memberlist resolves names) of
	// members to join: tried from Start until one answers, and again
	// whenever a known member is not alive (see reconnect.go).
	Seeds []string
	// Faults injects network faults into the gossip traffic (tests only).
	Faults *GossipFaults
	// ClockOffsets, if set, measures this node's clock against its
	// peers' through the pings' acks (memberlist's PingDelegate).
	ClockOffsets *ClockOffsets
	// Encryption, if set, encrypts the gossip with its keys.
	Encryption *GossipEncryption
	// KeyringFile, with Encryption, keeps the keyring as it changes
	// (GossipKeyring, SetGossipKeys), and is read at Start instead of
	// Encryption.Keys when it exists: a rotation made at run time
	// survives a restart.
	KeyringFile string
}

// GossipTiming tunes failure detection. Zero fields take the values of
// memberlist.DefaultLANConfig (probe every 1 s, timeout 500 ms, gossip
// every 200 ms, push/pull every 30 s, suspicion multiplier 4, TCP 10 s).
type GossipTiming struct {
	ProbeInterval    time.Duration
	ProbeTimeout     time.Duration
	GossipInterval   time.Duration
	PushPullInterval time.Duration
	SuspicionMult    int
	TCPTimeout       time.Duration
	// DeadNodeReclaim is how long a dead node's id stays bound to its old
	// address: after that, a node restarted on another address (a new
	// port, a new IP) may rejoin under the same id. memberlist's default is
	// never; ours is DefaultDeadNodeReclaim. A node that left can always
	// come back.
	DeadNodeReclaim time.Duration
	// ReconnectInterval is the mean time between two rounds of rejoining
	// dead members and the seeds, while a known member is not alive
	// (jittered by ±50%). Default DefaultReconnectInterval.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a dead member is tried again before it
	// is given up (the seeds are always tried). Default
	// DefaultReconnectTimeout.
	ReconnectTimeout time.Duration
}

// Defaults of GossipTiming.
const (
	DefaultDeadNodeReclaim   = 10 * time.Second
	DefaultReconnectInterval = 3 * time.Second
	DefaultReconnectTimeout  = 24 * time.Hour
)

// FastGossipTiming suits tests on loopback: failures are declared within
// about a second.
func FastGossipTiming() GossipTiming {
	return GossipTiming{
		ProbeInterval:     100 * time.Millisecond,
		ProbeTimeout:      50 * time.Millisecond,
		GossipInterval:    20 * time.Millisecond,
		PushPullInterval:  time.Second,
		SuspicionMult:     2,
		TCPTimeout:        250 * time.Millisecond,
		DeadNodeReclaim:   200 * time.Millisecond,
		ReconnectInterval: 300 * time.Millisecond,
	}
}

// Validate checks the config; errors wrap ErrConfig.
func (c MembershipConfig) Validate() error {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return fmt.Errorf("%w: membership: %w", topology.ErrConfig, err)
	}
	return nil
}

func (c MembershipConfig) validate() error {
	if err := c.NodeID.Validate(); err != nil {
		return err
	}
	if _, _, err := splitIPPort(c.BindAddr); err != nil {
		return fmt.Errorf("bind address: %w", err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitIPPort(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("advertise address: %w", err)
		}
	}
	if c.Meta.ID != c.NodeID {
		return fmt.Errorf("meta id %q is not node id %q", c.Meta.ID, c.NodeID)
	}
	if _, err := c.Meta.MarshalBinary(); err != nil {
		return err
	}
	t := c.Timing
	if t.ProbeInterval < 0 || t.ProbeTimeout < 0 || t.GossipInterval < 0 || t.PushPullInterval < 0 ||
		t.SuspicionMult < 0 || t.TCPTimeout < 0 || t.DeadNodeReclaim < 0 ||
		t.ReconnectInterval < 0 || t.ReconnectTimeout < 0 {
		return fmt.Errorf("negative gossip timing %+v", t)
	}
	return nil
}

func (c MembershipConfig) withDefaults() MembershipConfig {
	if c.BindAddr == "" {
		c.BindAddr = DefaultGossipAddr
	}
	if c.Meta.ID == "" {
		c.Meta.ID = c.NodeID
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Timing.ReconnectInterval == 0 {
		c.Timing.ReconnectInterval = DefaultReconnectInterval
	}
	if c.Timing.ReconnectTimeout == 0 {
		c.Timing.ReconnectTimeout = DefaultReconnectTimeout
	}
	return c
}

// splitIPPort splits an ip:port address. memberlist takes IP literals
// only (it would read a host name, or an empty host, as every interface).
func splitIPPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("%q is not an IP address", host)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, int(port), nil
}

// MemberState is a member's state as gossip reports it.
//
// memberlist v0.5.4 raises no event when it starts suspecting a node and
// never fills Node.State (its internal nodeState shadows the field), so a
// suspected node shows as alive until memberlist declares it gone.
type MemberState uint8

const (
	MemberAlive MemberState = iota + 1
	MemberDead
	MemberLeft // left on purpose (Leave)
)

var memberStateNames = [...]string{"", "alive", "dead", "left"}

func (s MemberState) String() string {
	if s >= MemberAlive && s <= MemberLeft {
		return memberStateNames[s]
	}
	return fmt.Sprintf("member-state(%d)", uint8(s))
}

// Member is one node as seen through gossip.
type Member struct {
	ID    topology.NodeID
	Addr  string // gossip address
	Meta  topology.NodeMeta
	State MemberState
	// MetaErr is set when the node's metadata did not decode (a newer or
	// foreign node); Meta is then zero.
	MetaErr error
	// Since is when this node last saw the member change state.
	Since time.Time
}

// EventKind says what happened to a member.
type EventKind uint8

const (
	EventJoin EventKind = iota + 1
	EventUpdate
	EventLeave // dead or left: see Member.State
)

// Event reports a change of one member.
type Event struct {
	Kind   EventKind
	Member Member
}

// Membership is a node's view of the cluster through hashicorp/memberlist.
// All methods are safe for concurrent use.
//
// Lock order: memberlist calls the delegates with its own locks held, and
// they take mu; so nothing calls into memberlist while holding mu. life is
// held for reading around every call into memberlist and for writing by
// Start and Shutdown, so none of those calls meets a half-started or
// shut-down memberlist (whose Leave panics after Shutdown).
type Membership struct {
	cfg   MembershipConfig
	life  sync.RWMutex
	ml    *memberlist.Memberlist // set once by Start, under life
	trans *gossipTransport       // set once by Start, under life
	ring  *memberlist.Keyring    // nil: gossip in plaintext
	// drains counts memberlist's calls for broadcasts: one a message it
	// sends, and one a gossip round and target. A test that waits for it
	// to advance knows the queued broadcasts have gone out.
	drains atomic.Uint64

	mu       sync.Mutex
	addr     string
	meta     []byte
	members  map[topology.NodeID]Member
	queue    []Event
	shutdown bool
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{} // closed when dispatch has returned
	loops    sync.WaitGroup
}

// NewMembership validates cfg; Start begins gossip.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	meta, _ := cfg.Meta.MarshalBinary()
	return &Membership{
		cfg: cfg, meta: meta, members: map[topology.NodeID]Member{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Start binds the gossip listeners and starts gossip; the node is then a
// cluster of one until Join.
func (m *Membership) Start() error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.isShutdown() {
		return ErrShutdown
	}
	if m.ml != nil {
		return nil
	}
	mc := m.memberlistConfig()
	var crypto *gossipCrypto
	if e := m.cfg.Encryption; e != nil {
		keys := e.Keys
		if m.cfg.KeyringFile != "" {
			if b, err := os.ReadFile(m.cfg.KeyringFile); err == nil {
				if keys, err = ParseGossipKeys(string(b)); err != nil {
					return fmt.Errorf("cluster: %s: %w", m.cfg.KeyringFile, err)
				}
			} else if !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("cluster: gossip keyring: %w", err)
			}
		}
		ring, err := memberlist.NewKeyring(keys, keys[0])
		if err != nil {
			return fmt.Errorf("cluster: gossip keyring: %w", err)
		}
		mc.Keyring, mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = ring, e.VerifyIncoming, e.VerifyOutgoing
		m.ring = ring
		crypto = &gossipCrypto{keyring: ring, verifyIncoming: e.VerifyIncoming}
	}
	trans, err := newGossipTransport(mc.BindAddr, mc.BindPort, m.cfg.Faults, crypto, m.cfg.Logger, mc.Logger)
	if err != nil {
		return fmt.Errorf("cluster: start membership on %s: %w", m.cfg.BindAddr, err)
	}
	if mc.BindPort == 0 {
		mc.BindPort = trans.Port()
		if m.cfg.AdvertiseAddr == "" {
			mc.AdvertisePort = mc.BindPort
		}
	}
	mc.Transport = trans
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = trans.Shutdown()
		return fmt.Errorf("cluster: start membership on %s: %w", m.cfg.BindAddr, err)
	}
	m.ml, m.trans = ml, trans
	m.mu.Lock()
	// With port 0, memberlist has written the bound port into mc.
	m.addr = net.JoinHostPort(mc.AdvertiseAddr, strconv.Itoa(mc.AdvertisePort))
	if self, ok := m.members[m.cfg.NodeID]; ok {
		m.addr = self.Addr
	}
	m.mu.Unlock()
	if m.cfg.OnEvent != nil {
		go m.dispatch()
	} else {
		close(m.done)
	}
	m.loops.Add(1)
	go m.reconnectLoop()
	return nil
}

func (m *Membership) isShutdown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shutdown
}

// SetGossipKeys rotates the gossip keys to keys, the first the primary:
// new keys are installed, then the primary switched, then the keys left
// out removed, so that a rotation staged across the cluster (install
// everywhere, then use everywhere, then remove) never loses a member.
// It fails when gossip is not encrypted.
func (m *Membership) SetGossipKeys(keys [][]byte) error {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.ring == nil {
		return errors.New("cluster: gossip encryption is off: no keyring to rotate")
	}
	if err := setGossipKeys(m.ring, keys); err != nil {
		return err
	}
	return m.persistKeys()
}

// GossipKeyring lists the keyring (action topology.KeyringList) or changes it by
// one key (topology.KeyringInstall, topology.KeyringUse, topology.KeyringRemove), and returns the
// keys after it, the primary first. A change is kept in KeyringFile.
func (m *Membership) GossipKeyring(action string, key []byte) ([][]byte, error) {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.ring == nil {
		return nil, errors.New("cluster: gossip encryption is off: no keyring")
	}
	var err error
	switch action {
	case topology.KeyringList:
		return m.ring.GetKeys(), nil
	case topology.KeyringInstall:
		err = m.ring.AddKey(key)
	case topology.KeyringUse:
		err = m.ring.UseKey(key)
	case topology.KeyringRemove:
		err = m.ring.RemoveKey(key)
	default:
		err = fmt.Errorf("cluster: unknown keyring action %q", action)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip keyring %s: %w", action, err)
	}
	if err := m.persistKeys(); err != nil {
		return nil, err
	}
	return m.ring.GetKeys(), nil
}

// persistKeys writes the keyring to KeyringFile, if there is one.
func (m *Membership) persistKeys() error {
	if m.cfg.KeyringFile == "" {
		return nil
	}
	if err := writeKeyring(m.cfg.KeyringFile, m.ring.GetKeys()); err != nil {
		return fmt.Errorf("cluster: keeping the gossip keyring: %w", err)
	}
	return nil
}

func (m *Membership) memberlistConfig() *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	c.Name = string(m.cfg.NodeID)
	host, port, _ := splitIPPort(m.cfg.BindAddr)
	c.BindAddr, c.BindPort = host, port
	c.AdvertiseAddr, c.AdvertisePort = "", port
	if m.cfg.AdvertiseAddr != "" {
		c.AdvertiseAddr, c.AdvertisePort, _ = splitIPPort(m.cfg.AdvertiseAddr)
	} else if !net.ParseIP(host).IsUnspecified() {
		c.AdvertiseAddr = host
	}
	t := m.cfg.Timing
	setDuration(&c.ProbeInterval, t.ProbeInterval)
	setDuration(&c.ProbeTimeout, t.ProbeTimeout)
	setDuration(&c.GossipInterval, t.GossipInterval)
	setDuration(&c.PushPullInterval, t.PushPullInterval)
	setDuration(&c.TCPTimeout, t.TCPTimeout)
	c.DeadNodeReclaimTime = DefaultDeadNodeReclaim
	setDuration(&c.DeadNodeReclaimTime, t.DeadNodeReclaim)
	if t.SuspicionMult > 0 {
		c.SuspicionMult = t.SuspicionMult
	}
	c.Delegate = delegate{m}
	c.Events = events{m}
	if m.cfg.ClockOffsets != nil {
		c.Ping = pingDelegate{m.cfg.ClockOffsets}
	}
	c.Logger = log.New(logWriter{m.cfg.Logger}, "", 0)
	return c
}

func setDuration(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

// Addr is the gossip address this node advertises ("" before Start).
func (m *Membership) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// use runs fn on the running memberlist under life's read lock.
func (m *Membership) use(fn func(ml *memberlist.Memberlist) error) error {
	m.life.RLock()
	defer m.life.RUnlock()
	switch {
	case m.isShutdown():
		return ErrShutdown
	case m.ml == nil:
		return ErrNotStarted
	}
	return fn(m.ml)
}

// Join contacts the given gossip addresses (host:port) and merges state
// with each one reached; it returns how many were reached and fails only
// when none was.
func (m *Membership) Join(addrs []string) (int, error) {
	n := 0
	err := m.use(func(ml *memberlist.Memberlist) error {
		var err error
		if n, err = ml.Join(addrs); err != nil {
			return fmt.Errorf("%w: %v: %w", ErrJoin, addrs, err)
		}
		return nil
	})
	return n, err
}

// RefusedFrames counts the gossip packets and stream messages refused
// before memberlist decoded them (see checkStream, checkPacket).
func (m *Membership) RefusedFrames() uint64 {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.trans == nil {
		return 0
	}
	return m.trans.Refused()
}

// Members returns every member this node has heard of, itself included,
// sorted by id; dead and left members stay listed with their state.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.SortedFunc(maps.Values(m.members), func(a, b Member) int {
		return compareIDs(a.ID, b.ID)
	})
}

func compareIDs(a, b topology.NodeID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// UpdateMeta changes the gossiped metadata and waits up to timeout for
// the change to be sent out.
func (m *Membership) UpdateMeta(meta topology.NodeMeta, timeout time.Duration) error {
	if meta.ID == "" {
		meta.ID = m.cfg.NodeID
	}
	if meta.ID != m.cfg.NodeID {
		return fmt.Errorf("%w: meta id %q is not node id %q", topology.ErrMeta, meta.ID, m.cfg.NodeID)
	}
	b, err := meta.MarshalBinary()
	if err != nil {
		return err
	}
	return m.use(func(ml *memberlist.Memberlist) error {
		m.mu.Lock()
		m.meta, m.cfg.Meta = b, meta
		m.mu.Unlock()
		if err := ml.UpdateNode(timeout); err != nil {
			return fmt.Errorf("cluster: update meta: %w", err)
		}
		return nil
	})
}

// Leave tells the cluster this node leaves on purpose and waits up to
// timeout for each of its two messages to go out: first its metadata with
// a leaving flag, then memberlist's leave. Others then see it as left
// rather than dead. The node keeps gossiping until Shutdown.
func (m *Membership) Leave(timeout time.Duration) error {
	return m.use(func(ml *memberlist.Memberlist) error {
		m.mu.Lock()
		meta, err := m.cfg.Meta.Encode(topology.MetaLeaving)
		if err == nil {
			m.meta = meta
		}
		m.mu.Unlock()
		if err != nil {
			return err
		}
		if err := ml.UpdateNode(timeout); err != nil {
			return fmt.Errorf("cluster: leave: %w", err)
		}
		if err := ml.Leave(timeout); err != nil {
			return fmt.Errorf("cluster: leave: %w", err)
		}
		return nil
	})
}

// Shutdown stops gossip and the event goroutine; without Leave first, the
// others will find this node dead. It waits for a running OnEvent to
// return, so OnEvent must not call it. Safe to call more than once.
func (m *Membership) Shutdown() error {
	m.life.Lock()
	m.mu.Lock()
	already := m.shutdown
	m.shutdown = true
	m.mu.Unlock()
	if already || m.ml == nil {
		m.life.Unlock()
		return nil
	}
	close(m.stop)
	err := m.ml.Shutdown()
	m.life.Unlock()
	<-m.done
	m.loops.Wait()
	if err != nil {
		return fmt.Errorf("cluster: shutdown membership: %w", err)
	}
	return nil
}

// AliveSet turns a membership view into Plan's alive argument.
func AliveSet(members []Member) map[topology.NodeID]bool {
	alive := make(map[topology.NodeID]bool, len(members))
	for _, m := range members {
		if m.State == MemberAlive {
			alive[m.ID] = true
		}
	}
	return alive
}
