package raftlog

import (
	"io"
	"sync"
	"sync/atomic"
)

// Faults injects network faults into one Mux, for in-process cluster tests.
// Give each Mux its own Faults (in MuxConfig.Faults); peers are named by
// their advertised mux address, the address raft dials and the one a peer
// writes in its connection header.
//
// While a peer is blocked (by Block, or by Isolate for every peer), the Mux
// fails dials to it with ErrPeerBlocked, closes connections accepted from it
// right after their header, and has already closed every live connection to
// or from it: Block and Isolate close them before returning. Because the
// Mux refuses both directions, blocking B on A's Faults alone cuts A from B;
// a test harness may block on both sides for symmetry.
//
// Pause stalls the Mux's traffic instead, closing nothing: until Resume,
// data read from its connections is held back from the node's Raft, and
// writes wait. Peers see what a stopped process or a black-holed network
// shows them: silence and timeouts, no resets. The paused node's own Raft
// keeps running (a stalled leader steps down when its lease expires).
//
// The zero value is ready to use and injects nothing. All methods are safe
// for concurrent use; a nil *Faults injects nothing.
type Faults struct {
	paused atomic.Pointer[chan struct{}] // closed by Resume; nil when not paused

	mu       sync.Mutex
	isolated bool
	blocked  map[string]bool
	conns    map[string]map[io.Closer]struct{} // live conns by peer
}

// Block cuts the Mux off from peer until Unblock or Heal.
func (f *Faults) Block(peer string) {
	f.mu.Lock()
	if f.blocked == nil {
		f.blocked = make(map[string]bool)
	}
	f.blocked[peer] = true
	victims := f.takeLocked(func(p string) bool { return p == peer })
	f.mu.Unlock()
	closeAll(victims)
}

// Unblock undoes Block(peer). It does not undo Isolate.
func (f *Faults) Unblock(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.blocked, peer)
}

// Isolate cuts the Mux off from every peer until Heal.
func (f *Faults) Isolate() {
	f.mu.Lock()
	f.isolated = true
	victims := f.takeLocked(func(string) bool { return true })
	f.mu.Unlock()
	closeAll(victims)
}

// Heal undoes Isolate and every Block.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.isolated = false
	clear(f.blocked)
}

// Pause stalls all traffic of the Mux until Resume.
func (f *Faults) Pause() {
	ch := make(chan struct{})
	f.paused.CompareAndSwap(nil, &ch)
}

// Resume ends a Pause; held data flows again.
func (f *Faults) Resume() {
	if ch := f.paused.Swap(nil); ch != nil {
		close(*ch)
	}
}

// wait returns at once unless the Mux is paused; then it waits for Resume
// (true) or for abort to close (false).
func (f *Faults) wait(abort <-chan struct{}) bool {
	if f == nil {
		return true
	}
	ch := f.paused.Load()
	if ch == nil {
		return true
	}
	select {
	case <-*ch:
		return true
	case <-abort:
		return false
	}
}

// Blocked reports whether connections to and from peer are refused now.
func (f *Faults) Blocked(peer string) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.isolated || f.blocked[peer]
}

// track registers a live connection with peer, unless peer is blocked, in
// which case it returns false and the caller must close c. The check and
// the registration are one step, so no connection slips past a Block.
func (f *Faults) track(peer string, c io.Closer) bool {
	if f == nil {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.isolated || f.blocked[peer] {
		return false
	}
	if f.conns == nil {
		f.conns = make(map[string]map[io.Closer]struct{})
	}
	if f.conns[peer] == nil {
		f.conns[peer] = make(map[io.Closer]struct{})
	}
	f.conns[peer][c] = struct{}{}
	return true
}

// untrack forgets a connection registered by track.
func (f *Faults) untrack(peer string, c io.Closer) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns[peer], c)
	if len(f.conns[peer]) == 0 {
		delete(f.conns, peer)
	}
}

// takeLocked removes and returns the live conns of the peers that match.
func (f *Faults) takeLocked(match func(peer string) bool) []io.Closer {
	var victims []io.Closer
	for peer, set := range f.conns {
		if !match(peer) {
			continue
		}
		for c := range set {
			victims = append(victims, c)
		}
		delete(f.conns, peer)
	}
	return victims
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		_ = c.Close()
	}
}
