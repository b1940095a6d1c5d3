package gossip

import (
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/l4xg/grid/cluster/topology"
)

// DefaultAddr is where a node gossips unless told otherwise.
const DefaultAddr = "127.0.0.1:7422"

// Config configures a node's gossip membership. The zero value of
// every field but NodeID is a working default.
type Config struct {
	NodeID topology.NodeID // required; the memberlist node name
	// BindAddr is ip:port to listen on (TCP and UDP); port 0 picks a free
	// port, which is then advertised. Default DefaultAddr.
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
	Timing Timing
	// Seeds are gossip addresses (host:port; memberlist resolves names) of
	// members to join: tried from Start until one answers, and again
	// whenever a known member is not alive (see reconnect.go).
	Seeds []string
	// Faults injects network faults into the gossip traffic (tests only).
	Faults *Faults
	// Clocks, if set, measures this node's clock against its peers'
	// through the pings' acks (memberlist's PingDelegate).
	Clocks ClockProbe
	// Encryption, if set, encrypts the gossip with its keys.
	Encryption *Encryption
	// KeyringFile, with Encryption, keeps the keyring as it changes
	// (Keyring, SetKeys), and is read at Start instead of
	// Encryption.Keys when it exists: a rotation made at run time
	// survives a restart.
	KeyringFile string
}

// Timing tunes failure detection. Zero fields take the values of
// memberlist.DefaultLANConfig (probe every 1 s, timeout 500 ms, gossip
// every 200 ms, push/pull every 30 s, suspicion multiplier 4, TCP 10 s).
type Timing struct {
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

// ProbePeriod is the probe interval in force: ProbeInterval, or
// memberlist's default when it is zero. memberlist probes one member a
// period, in turn.
func (t Timing) ProbePeriod() time.Duration {
	if t.ProbeInterval > 0 {
		return t.ProbeInterval
	}
	return memberlist.DefaultLANConfig().ProbeInterval
}

// Defaults of Timing.
const (
	DefaultDeadNodeReclaim   = 10 * time.Second
	DefaultReconnectInterval = 3 * time.Second
	DefaultReconnectTimeout  = 24 * time.Hour
)

// FastTiming suits tests on loopback: failures are declared within
// about a second.
func FastTiming() Timing {
	return Timing{
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
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return fmt.Errorf("%w: membership: %w", topology.ErrConfig, err)
	}
	return nil
}

func (c Config) validate() error {
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

func (c Config) withDefaults() Config {
	if c.BindAddr == "" {
		c.BindAddr = DefaultAddr
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
	if m.cfg.Clocks != nil {
		c.Ping = pingDelegate{m.cfg.Clocks}
	}
	c.Logger = log.New(logWriter{m.cfg.Logger}, "", 0)
	return c
}

func setDuration(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}
