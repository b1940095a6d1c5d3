package cluster

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/shard"
)

// ClockOffsets measures this node's clock against its peers' over the
// gossip failure detector: every ack of a memberlist ping carries the
// acking node's clock (the clock that stamps its shard entries, not the
// process's wall clock when another is injected), and the pinging node
// estimates the peer's offset as peerTime - (localNow - rtt/2), with an
// uncertainty of rtt/2. It keeps each peer's latest estimate; estimates
// older than the window are ignored, and a peer that leaves or dies is
// forgotten.
//
// The node's offset is the median of its peers' recent estimates (for an
// even count, the one of the two middle values nearer zero). A peer is
// beyond the bound when its estimate is farther than the maximum offset
// even allowing for the estimate's uncertainty, and within it when its
// estimate is inside the bound allowing for the uncertainty too; an
// estimate whose round trip was too slow to tell is neither, so a stalled
// ping can move the verdict neither way. The verdict is taken against
// every peer the node knows, measured recently or not: the node is
// outside when more than half of them are recently measured beyond the
// bound, inside when at least half are recently measured within it, and
// otherwise (too few decisive recent estimates) the last verdict stands. In
// a 3-node cluster with one clock off, only that node finds both of its
// peers beyond the bound, the others one of two; a correct node whose
// estimate of its other correct peer went stale (its pings were slow)
// stays inside rather than take the one peer it measured for the majority.
// A node with no verdict yet is inside (its shards still check their clock
// against their own stamps). It implements shard.PeerClocks. Its methods
// are safe for concurrent use.
type ClockOffsets struct {
	clock  func() time.Time
	now    func() time.Time
	max    time.Duration
	window time.Duration

	mu    sync.Mutex
	peers map[topology.NodeID]peerSample
	// outside is the standing verdict, changed only by a decisive Report.
	outside bool
	// verdict caches Check's answer until its until: proposals ask for it.
	verdict atomic.Pointer[clockVerdict]
}

var (
	_ shard.PeerClocks  = (*ClockOffsets)(nil)
	_ gossip.ClockProbe = (*ClockOffsets)(nil)
)

type peerSample struct {
	offset, uncertainty time.Duration
	at                  time.Time // by the runtime clock
}

type clockVerdict struct {
	err   error
	until time.Time
}

// ClockOffsetsConfig configures a ClockOffsets. Zero values are defaults.
type ClockOffsetsConfig struct {
	// Clock is the clock measured and sent to the peers: the one that
	// stamps the node's shard entries. Default time.Now.
	Clock func() time.Time
	// Now is the runtime clock that ages estimates. Default time.Now.
	Now func() time.Time
	// MaxOffset is the bound (gridnode serve --max-clock-offset); default
	// digest.DefaultMaxClockOffset.
	MaxOffset time.Duration
	// Window is how long an estimate counts; default ClockWindowProbes
	// probe intervals of Timing.
	Window time.Duration
	Timing gossip.Timing
}

// ClockWindowProbes is the default window of estimates, in gossip probe
// intervals: memberlist probes one peer per interval, in turn, so a peer
// is measured once per round over all peers; at the default 1 s interval
// the window is 30 s.
const ClockWindowProbes = 30

// NewClockOffsets returns an empty ClockOffsets.
func NewClockOffsets(cfg ClockOffsetsConfig) (*ClockOffsets, error) {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxOffset == 0 {
		cfg.MaxOffset = digest.DefaultMaxClockOffset
	}
	if err := shard.ValidateMaxClockOffset(cfg.MaxOffset); err != nil {
		return nil, fmt.Errorf("%w: %w", topology.ErrConfig, err)
	}
	if cfg.Window <= 0 {
		cfg.Window = ClockWindowProbes * cfg.Timing.ProbePeriod()
	}
	return &ClockOffsets{clock: cfg.Clock, now: cfg.Now, max: cfg.MaxOffset, window: cfg.Window, peers: map[topology.NodeID]peerSample{}}, nil
}

// MaxOffset is the bound in force.
func (o *ClockOffsets) MaxOffset() time.Duration { return o.max }

// The ack payload: a version byte, then the sender's clock in Unix
// nanoseconds, big-endian.
const (
	clockPayloadVersion = 1
	clockPayloadLen     = 9
)

// AckPayload is what this node's acks carry: its clock now.
func (o *ClockOffsets) AckPayload() []byte {
	b := make([]byte, clockPayloadLen)
	b[0] = clockPayloadVersion
	binary.BigEndian.PutUint64(b[1:], uint64(o.clock().UnixNano()))
	return b
}

// Observe records the estimate of one ping of peer, answered after rtt
// with payload. A payload this node cannot read (an older or foreign
// node's) is ignored.
func (o *ClockOffsets) Observe(peer topology.NodeID, payload []byte, rtt time.Duration) {
	if len(payload) != clockPayloadLen || payload[0] != clockPayloadVersion || rtt < 0 {
		return
	}
	peerTime := time.Unix(0, int64(binary.BigEndian.Uint64(payload[1:])))
	s := peerSample{offset: peerTime.Sub(o.clock().Add(-rtt / 2)), uncertainty: rtt / 2, at: o.now()}
	o.mu.Lock()
	o.peers[peer] = s
	o.mu.Unlock()
	o.refresh()
}

// Forget drops peer's estimate (it left or died).
func (o *ClockOffsets) Forget(peer topology.NodeID) {
	o.mu.Lock()
	delete(o.peers, peer)
	o.mu.Unlock()
	o.refresh()
}

// Report returns the current estimates and verdict.
func (o *ClockOffsets) Report() topology.ClockReport {
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	r := topology.ClockReport{MaxOffset: o.max, Known: len(o.peers)}
	for id, s := range o.peers {
		age := now.Sub(s.at)
		if age > o.window {
			continue
		}
		p := topology.PeerClock{ID: id, Offset: s.offset, Uncertainty: s.uncertainty, Age: age}
		p.Outside = abs(s.offset)-s.uncertainty > o.max
		p.Within = abs(s.offset)+s.uncertainty <= o.max
		r.Peers = append(r.Peers, p)
	}
	slices.SortFunc(r.Peers, func(a, b topology.PeerClock) int { return cmp.Compare(a.ID, b.ID) })
	offsets := make([]time.Duration, len(r.Peers))
	within := 0
	for i, p := range r.Peers {
		offsets[i] = p.Offset
		if p.Outside {
			r.Outside++
		}
		if p.Within {
			within++
		}
	}
	r.Offset = median(offsets)
	switch {
	case 2*r.Outside > r.Known:
		o.outside = true
	case 2*within >= r.Known:
		o.outside = false
	}
	r.OK = !o.outside
	return r
}

// median of ds, for an even count the middle value nearer zero; 0 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	m := ds[len(ds)/2]
	if len(ds)%2 == 0 && abs(ds[len(ds)/2-1]) < abs(m) {
		m = ds[len(ds)/2-1]
	}
	return m
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// Check is nil while this node is within the bound of its peers (or has
// measured none recently), else an error wrapping shard.ErrClockOffset
// with the measured offset. The verdict is cached for a second at most
// (shorter with a short window), and renewed at every new estimate.
func (o *ClockOffsets) Check() error {
	if v := o.verdict.Load(); v != nil && o.now().Before(v.until) {
		return v.err
	}
	return o.refresh()
}

func (o *ClockOffsets) refresh() error {
	r := o.Report()
	v := &clockVerdict{until: o.now().Add(min(time.Second, o.window/10))}
	if !r.OK {
		dir := "behind"
		if r.Offset < 0 {
			dir = "ahead of"
		}
		v.err = fmt.Errorf("%w: this node's clock is %v %s its peers' (the median of %d recently measured of %d known; %d of them beyond the maximum clock offset %v)",
			shard.ErrClockOffset, abs(r.Offset), dir, len(r.Peers), r.Known, r.Outside, r.MaxOffset)
	}
	o.verdict.Store(v)
	return v.err
}

// Offset is peer's clock minus this node's, as last measured within the
// window.
func (o *ClockOffsets) Offset(peer string) (time.Duration, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.peers[topology.NodeID(peer)]
	if !ok || o.now().Sub(s.at) > o.window {
		return 0, false
	}
	return s.offset, true
}
