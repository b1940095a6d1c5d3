package gossip

import "sync"

// Faults injects network faults into one node's gossip, for
// in-process cluster tests; give it in Config.Faults. Peers are
// named by their gossip address (ip:port), which is also the source of
// their UDP packets.
//
// Block(peer) drops the packets sent to and received from peer, and fails
// this node's stream dials to it. A stream that peer dials in cannot be
// told apart from another on loopback, so it is refused on peer's side:
// block both ends, as a partition does. BlockPackets(peer) drops the
// packets only, leaving streams (TCP) through: what a firewall dropping UDP
// shows. Isolate cuts every peer, accepted streams included, until Heal.
//
// The zero value injects nothing; a nil *Faults injects nothing. All
// methods are safe for concurrent use.
type Faults struct {
	mu       sync.Mutex
	isolated bool
	cut      map[string]bool // peer -> true: streams too; false: packets only
}

// Block cuts peer off, packets and streams, until Unblock or Heal.
func (f *Faults) Block(peer string) { f.set(peer, true) }

// BlockPackets drops the packets to and from peer until Unblock or Heal;
// streams still pass. It does not weaken a Block.
func (f *Faults) BlockPackets(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.cut[peer] {
		f.setLocked(peer, false)
	}
}

func (f *Faults) set(peer string, streams bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(peer, streams)
}

func (f *Faults) setLocked(peer string, streams bool) {
	if f.cut == nil {
		f.cut = make(map[string]bool)
	}
	f.cut[peer] = streams
}

// Unblock undoes Block and BlockPackets of peer; it does not undo Isolate.
func (f *Faults) Unblock(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.cut, peer)
}

// Isolate cuts every peer until Heal.
func (f *Faults) Isolate() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.isolated = true
}

// Heal undoes Isolate and every Block.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.isolated = false
	clear(f.cut)
}

// dropsPacket reports whether a packet to or from peer is dropped.
func (f *Faults) dropsPacket(peer string) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, cut := f.cut[peer]
	return f.isolated || cut
}

// refusesDial reports whether a stream dial to peer fails.
func (f *Faults) refusesDial(peer string) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.isolated || f.cut[peer]
}

// refusesAccept reports whether accepted streams are closed.
func (f *Faults) refusesAccept() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.isolated
}
