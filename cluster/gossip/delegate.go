package gossip

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/l4xg/grid/cluster/topology"
)

// delegate and events adapt Membership to memberlist's callbacks.
// memberlist calls events while holding its node lock: they only record
// and queue, never call back into memberlist and never block.
type (
	delegate struct{ m *Membership }
	events   struct{ m *Membership }
)

var (
	_ memberlist.Delegate      = delegate{}
	_ memberlist.EventDelegate = events{}
)

func (d delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if len(d.m.meta) > limit {
		return nil // cannot happen: MarshalBinary enforces the limit
	}
	return bytes.Clone(d.m.meta)
}

func (delegate) NotifyMsg([]byte) {}
func (d delegate) GetBroadcasts(int, int) [][]byte {
	d.m.drains.Add(1)
	return nil
}
func (delegate) LocalState(bool) []byte          { return nil }
func (delegate) MergeRemoteState([]byte, bool)   {}
func (e events) NotifyJoin(n *memberlist.Node)   { e.m.record(EventJoin, n) }
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.record(EventUpdate, n) }
func (e events) NotifyLeave(n *memberlist.Node)  { e.m.record(EventLeave, n) }

// ClockProbe rides on the failure detector's pings: every ack this node
// sends carries AckPayload, every ack it receives is handed to Observe
// with the ping's round trip and the payload (the acking node's, which may
// be empty or of another version), and a member that dies or leaves is
// forgotten. memberlist calls them from its probe and event paths, with
// its locks held: they must not block or call back into the Membership.
// cluster.ClockOffsets implements it.
type ClockProbe interface {
	AckPayload() []byte
	Observe(peer topology.NodeID, payload []byte, rtt time.Duration)
	Forget(peer topology.NodeID)
}

// pingDelegate carries a ClockProbe's payload in memberlist's acks.
type pingDelegate struct{ p ClockProbe }

var _ memberlist.PingDelegate = pingDelegate{}

func (d pingDelegate) AckPayload() []byte { return d.p.AckPayload() }

func (d pingDelegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	d.p.Observe(topology.NodeID(other.Name), payload, rtt)
}

// record updates the member table from a memberlist callback and queues
// the event for OnEvent.
func (m *Membership) record(kind EventKind, n *memberlist.Node) {
	mem := Member{ID: topology.NodeID(n.Name), Addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))), State: MemberAlive}
	var flags byte
	mem.Meta, flags, mem.MetaErr = topology.DecodeMeta(n.Meta)
	mem.DiskFull = flags&topology.MetaDiskFull != 0
	if kind == EventLeave {
		// n.State is not maintained by memberlist v0.5.4 (its nodeState
		// shadows the field): the leaving flag tells left from dead.
		mem.State = MemberDead
		if flags&topology.MetaLeaving != 0 {
			mem.State = MemberLeft
		}
		if o := m.cfg.Clocks; o != nil {
			o.Forget(mem.ID)
		}
	}
	if mem.MetaErr == nil && mem.Meta.ID != mem.ID {
		mem.Meta, mem.MetaErr = topology.NodeMeta{}, fmt.Errorf("%w: id %q gossiped under name %q", topology.ErrMeta, mem.Meta.ID, n.Name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, known := m.members[mem.ID]
	mem.Since = old.Since
	if !known || old.State != mem.State {
		mem.Since = m.cfg.Clock()
	}
	if mem.MetaErr != nil && (!known || old.MetaErr == nil) {
		m.cfg.Logger.Warn("gossip: member gossips metadata this node cannot read", "member", n.Name, "addr", mem.Addr, "err", mem.MetaErr)
	}
	m.members[mem.ID] = mem
	if m.cfg.OnEvent == nil || m.shutdown {
		return
	}
	m.queue = append(m.queue, Event{Kind: kind, Member: mem})
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// dispatch hands queued events to OnEvent, one at a time, in order.
func (m *Membership) dispatch() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		case <-m.wake:
		}
		for {
			m.mu.Lock()
			if len(m.queue) == 0 || m.shutdown {
				m.mu.Unlock()
				break
			}
			ev := m.queue[0]
			m.queue = m.queue[1:]
			m.mu.Unlock()
			m.cfg.OnEvent(ev)
		}
	}
}

// logWriter routes memberlist's log lines ("[LEVEL] memberlist: ...") to
// slog; routine lines go to debug.
type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	level := slog.LevelDebug
	switch {
	case strings.HasPrefix(line, "[ERR]"):
		level = slog.LevelError
	case strings.HasPrefix(line, "[WARN]"):
		level = slog.LevelWarn
	case strings.HasPrefix(line, "[INFO]"):
		level = slog.LevelInfo
	}
	w.l.Log(context.Background(), level, line)
	return len(p), nil
}
