package client

import (
	"context"
	"sync"
)

// An Isolation makes a crash loop cost attempts of its culprit only. It is
// shared by the Process calls of one consumer process (WithIsolation); the
// broker adapters keep one each.
//
// A consumer runs many messages at once. When one of them crashes the
// process, every lease the process held expires unsettled, and each of
// those keys has used an attempt: the grid cannot tell the culprit from
// the messages that were in flight beside it. Run together again, they
// would all use another attempt at the culprit's next crash, and the
// innocent ones would be poisoned with it. An Isolation keeps them apart:
//
//   - A Reserve that takes a key over from a lease that expired unsettled
//     (Result.TookOverExpired) runs its handler alone: it waits, holding
//     its lease, until the handlers running beside it have ended, and no
//     other message starts until it ends. If it crashes the process, no
//     other key was held.
//   - A suspect, a message that may be such a takeover, is reserved only
//     when no other suspect's Reserve is in flight and nothing runs alone,
//     so that suspects do not queue up holding leases behind a culprit:
//     each would use an attempt at its crash. A message is a suspect when
//     its broker says it is delivered again (Redelivered), when its key
//     was answered BUSY to this consumer (another holder's lease ran,
//     perhaps a crashed one's), and while the consumer is on probation.
//     A suspect that is granted a fresh lease runs beside others.
//   - Probation starts with a takeover and with Probation (a Kafka consumer
//     calls it when it is assigned partitions, whose records a crashed
//     consumer may have held), and ends with the first fresh lease granted
//     to a suspect.
//
// Messages that merely arrive while a handler runs alone wait before their
// Reserve, holding nothing. The cost is a pause of the consumer while a
// taken-over message runs, after crashes and rebalances only.
type Isolation struct {
	mu           sync.Mutex
	shared       int  // leases held beside others (handlers running)
	alone        bool // a lease held alone
	reserving    bool // a suspect's Reserve in flight
	waitingAlone int  // leases held waiting to run alone: they go first
	probation    bool
	busy         map[string]struct{} // keys answered BUSY to this consumer
	wake         chan struct{}       // closed and replaced when the state changes
}

// maxBusyKeys bounds an Isolation's memory of keys answered BUSY; past it
// the memory starts again (a forgotten key is a suspect no more).
const maxBusyKeys = 4096

// NewIsolation returns an Isolation for one consumer.
func NewIsolation() *Isolation {
	return &Isolation{busy: map[string]struct{}{}, wake: make(chan struct{})}
}

// Probation makes the consumer's next messages suspects until one of them
// is granted a fresh lease (see Isolation).
func (g *Isolation) Probation() {
	g.mu.Lock()
	g.probation = true
	g.mu.Unlock()
}

// hold is what a Process call holds of its Isolation.
type hold uint8

const (
	holdNone      hold = iota
	holdShared         // runs beside others
	holdReserving      // a suspect's Reserve
	holdUpgrading      // a takeover's lease, waiting to run alone
	holdAlone          // runs alone
)

func busyKey(ns, key string) string { return ns + "\x00" + key }

// enter waits until the call may send its Reserve: as a suspect or not
// (see Isolation). A nil Isolation holds nothing.
func (g *Isolation) enter(ctx context.Context, ns, key string, redelivered bool) (hold, error) {
	if g == nil {
		return holdNone, nil
	}
	bk := busyKey(ns, key)
	var h hold
	err := g.await(ctx, func() bool {
		if g.alone || g.waitingAlone > 0 {
			return false
		}
		_, busy := g.busy[bk]
		if redelivered || busy || g.probation {
			if g.reserving {
				return false
			}
			g.reserving, h = true, holdReserving
			return true
		}
		g.shared++
		h = holdShared
		return true
	})
	return h, err
}

// granted moves h on after the Reserve was granted a lease: a takeover of
// an expired lease is to run alone (holdUpgrading until run waits for it),
// a fresh lease beside others.
func (g *Isolation) granted(h hold, ns, key string, tookOver bool) hold {
	if g == nil {
		return holdNone
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.busy, busyKey(ns, key))
	g.drop(h)
	if tookOver {
		g.probation = true
		g.waitingAlone++
		return holdUpgrading
	}
	if h == holdReserving {
		g.probation = false
	}
	g.shared++
	return holdShared
}

// runAlone waits, holding the lease, until nothing else runs, and takes
// the Isolation alone. On an error (ctx ended) h is given up.
func (g *Isolation) runAlone(ctx context.Context) (hold, error) {
	var h hold
	err := g.await(ctx, func() bool {
		if g.shared > 0 || g.alone || g.reserving {
			return false
		}
		g.waitingAlone--
		g.alone, h = true, holdAlone
		return true
	})
	if err != nil {
		g.leave(holdUpgrading)
	}
	return h, err
}

// refused gives h up after a Reserve that granted nothing; a BUSY key is a
// suspect from now on.
func (g *Isolation) refused(h hold, ns, key string, busy bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if busy {
		if len(g.busy) >= maxBusyKeys {
			clear(g.busy)
		}
		g.busy[busyKey(ns, key)] = struct{}{}
	}
	g.drop(h)
}

// leave gives h up.
func (g *Isolation) leave(h hold) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.drop(h)
	g.mu.Unlock()
}

// drop gives h up; g.mu is held.
func (g *Isolation) drop(h hold) {
	switch h {
	case holdNone:
		return
	case holdShared:
		g.shared--
	case holdReserving:
		g.reserving = false
	case holdUpgrading:
		g.waitingAlone--
	case holdAlone:
		g.alone = false
	}
	close(g.wake)
	g.wake = make(chan struct{})
}

// await calls take under g.mu until it returns true, waiting for changes
// of the state in between, or until ctx ends.
func (g *Isolation) await(ctx context.Context, take func() bool) error {
	for {
		g.mu.Lock()
		if take() {
			g.mu.Unlock()
			return nil
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}
