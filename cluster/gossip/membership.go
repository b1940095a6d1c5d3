package gossip

import (
	"cmp"
	"errors"
	"fmt"
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
	// DiskFull is set while the member gossips that its disk is below its
	// reserve (SetDiskFull).
	DiskFull bool
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
	cfg   Config
	life  sync.RWMutex
	ml    *memberlist.Memberlist // set once by Start, under life
	trans *transport             // set once by Start, under life
	ring  *memberlist.Keyring    // nil: gossip in plaintext
	// drains is Drains' counter, advanced by the delegate.
	drains atomic.Uint64

	mu       sync.Mutex
	addr     string
	meta     []byte
	flags    byte // gossiped with meta: topology.MetaDiskFull
	members  map[topology.NodeID]Member
	queue    []Event
	shutdown bool
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{} // closed when dispatch has returned
	loops    sync.WaitGroup
}

// New validates cfg; Start begins gossip.
func New(cfg Config) (*Membership, error) {
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
	var crypto *cryptoGuard
	if e := m.cfg.Encryption; e != nil {
		keys := e.Keys
		if m.cfg.KeyringFile != "" {
			if b, err := os.ReadFile(m.cfg.KeyringFile); err == nil {
				if keys, err = ParseKeys(string(b)); err != nil {
					return fmt.Errorf("gossip: %s: %w", m.cfg.KeyringFile, err)
				}
			} else if !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("gossip: keyring: %w", err)
			}
		}
		ring, err := memberlist.NewKeyring(keys, keys[0])
		if err != nil {
			return fmt.Errorf("gossip: keyring: %w", err)
		}
		mc.Keyring, mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = ring, e.VerifyIncoming, e.VerifyOutgoing
		m.ring = ring
		crypto = &cryptoGuard{keyring: ring, verifyIncoming: e.VerifyIncoming}
	}
	trans, err := newTransport(mc.BindAddr, mc.BindPort, m.cfg.Faults, crypto, m.cfg.Logger, mc.Logger)
	if err != nil {
		return fmt.Errorf("gossip: start membership on %s: %w", m.cfg.BindAddr, err)
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
		return fmt.Errorf("gossip: start membership on %s: %w", m.cfg.BindAddr, err)
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

// Drains counts memberlist's calls for broadcasts: one a message it sends,
// and one a gossip round and target. A caller that waits for it to
// advance knows the broadcasts queued before have gone out.
func (m *Membership) Drains() uint64 { return m.drains.Load() }

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

// UndecryptableFrames counts the gossip packets that no key of the
// keyring opened (0 without encryption): during a key rotation done in
// order (install everywhere, use everywhere, remove) it stays 0.
func (m *Membership) UndecryptableFrames() uint64 {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.trans == nil || m.trans.crypto == nil {
		return 0
	}
	return m.trans.crypto.undecryptable.Load()
}

// Members returns every member this node has heard of, itself included,
// sorted by id; dead and left members stay listed with their state.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.SortedFunc(maps.Values(m.members), func(a, b Member) int {
		return cmp.Compare(a.ID, b.ID)
	})
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
	return m.use(func(ml *memberlist.Memberlist) error {
		m.mu.Lock()
		b, err := meta.Encode(m.flags)
		if err == nil {
			m.meta, m.cfg.Meta = b, meta
		}
		m.mu.Unlock()
		if err != nil {
			return err
		}
		if err := ml.UpdateNode(timeout); err != nil {
			return fmt.Errorf("gossip: update meta: %w", err)
		}
		return nil
	})
}

// SetDiskFull gossips whether this node's disk is below its reserve (the
// flag topology.MetaDiskFull, which Member.DiskFull reports to the
// others), and waits up to timeout for the change to be sent out.
func (m *Membership) SetDiskFull(full bool, timeout time.Duration) error {
	return m.use(func(ml *memberlist.Memberlist) error {
		m.mu.Lock()
		flags := m.flags &^ topology.MetaDiskFull
		if full {
			flags |= topology.MetaDiskFull
		}
		b, err := m.cfg.Meta.Encode(flags)
		if err == nil {
			m.meta, m.flags = b, flags
		}
		m.mu.Unlock()
		if err != nil {
			return err
		}
		if err := ml.UpdateNode(timeout); err != nil {
			return fmt.Errorf("gossip: update meta: %w", err)
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
		meta, err := m.cfg.Meta.Encode(m.flags | topology.MetaLeaving)
		if err == nil {
			m.meta = meta
		}
		m.mu.Unlock()
		if err != nil {
			return err
		}
		if err := ml.UpdateNode(timeout); err != nil {
			return fmt.Errorf("gossip: leave: %w", err)
		}
		if err := ml.Leave(timeout); err != nil {
			return fmt.Errorf("gossip: leave: %w", err)
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
		return fmt.Errorf("gossip: shutdown membership: %w", err)
	}
	return nil
}

// AliveSet turns a membership view into the alive argument of the
// planners (topology.PlanGroups, topology.PlanControl).
func AliveSet(members []Member) map[topology.NodeID]bool {
	alive := make(map[topology.NodeID]bool, len(members))
	for _, m := range members {
		if m.State == MemberAlive {
			alive[m.ID] = true
		}
	}
	return alive
}
