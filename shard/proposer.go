package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

// proposer turns concurrent Propose calls into few, large log entries (group
// commit): while up to maxInflight entries are on their way through Raft,
// new requests queue, and the next entry takes everything queued (up to
// maxCommands). A lone request goes out at once; load forms batches by itself.
//
// It also stamps every entry with the leader's time, never behind the
// previous stamp, so deadlines only move forward (docs/design.md section 3).
type proposer struct {
	raft        *raft.Raft
	clock       func() time.Time
	floor       func() int64 // the latest applied stamp
	maxCommands int
	policy      atomic.Pointer[keyspace.TierPolicy] // carried by every tick entry; replaced by setPolicy
	layout      digest.TokenLayout                  // carried by every entry
	observe     func(commands int, took time.Duration, res []keyspace.Result, cmds []keyspace.Command)
	// stages receives the times of each applied entry (nil: none).
	stages func(b *batch, a *applied, answered time.Time)

	in       chan *request
	inflight chan struct{}
	quit     chan struct{}
	wg       sync.WaitGroup

	// closeMu orders sends on in against close: once closed is set, no
	// request enters the queue, so none is left behind unanswered.
	closeMu sync.RWMutex
	closed  bool

	// rules decide which entries may grant leases (clock.go).
	rules clockRules

	stampMu   sync.Mutex
	lastStamp int64
}

// clockRules are the proposer's part of the clock rules (doc.go, Time).
type clockRules struct {
	shard     uint64
	maxOffset time.Duration
	peers     PeerClocks // nil: no peer measurement
	metrics   *Metrics   // nil: none
}

type request struct {
	cmds  []keyspace.Command
	bytes int
	tick  bool
	start time.Time
	res   []keyspace.Result
	err   error
	done  chan struct{}
}

// batch is one entry on its way through Raft and the requests it carries.
type batch struct {
	future   raft.ApplyFuture
	proposed time.Time // when it was handed to Raft
	reqs     []*request
	cmds     []keyspace.Command
}

func newProposer(r *raft.Raft, clock func() time.Time, floor func() int64, policy keyspace.TierPolicy, rules clockRules, maxCommands, maxInflight int) *proposer {
	p := &proposer{
		raft:        r,
		rules:       rules,
		clock:       clock,
		floor:       floor,
		maxCommands: maxCommands,
		in:          make(chan *request, 4*maxInflight),
		inflight:    make(chan struct{}, maxInflight),
		quit:        make(chan struct{}),
	}
	p.setPolicy(policy)
	pending := make(chan batch, maxInflight)
	p.wg.Add(2)
	go p.run(pending)
	go p.complete(pending)
	return p
}

// setPolicy replaces the tiering policy the next tick entries carry.
func (p *proposer) setPolicy(policy keyspace.TierPolicy) { p.policy.Store(&policy) }

// stamp returns the time for a new entry: max(previous, clock, floor), or
// max(previous, floor) without the clock of a node outside the bound of
// its peers (its clock must not move the shard's time).
func (p *proposer) stamp(floor int64, useClock bool) int64 {
	p.stampMu.Lock()
	defer p.stampMu.Unlock()
	now := max(p.lastStamp, floor)
	if useClock {
		now = max(now, p.clock().UnixMilli())
	}
	p.lastStamp = now
	return now
}

// base returns the stamp a new entry must not go below, max(previous,
// floor), and the clock.
func (p *proposer) base(floor int64) (base, clock int64) {
	p.stampMu.Lock()
	defer p.stampMu.Unlock()
	return max(p.lastStamp, floor), p.clock().UnixMilli()
}

// admit applies the clock rules to the entry b is about to become and
// returns its stamp. An entry that carries a Reserve or an Extend is
// stamped with the leader's own clock reading, never with a previous
// stamp above it: when the clock is behind the stamps by at most the
// maximum offset, admit waits for it to reach them (at most that long).
// The requests carrying those commands are refused (answered, and taken
// out of b) when the clock is behind by more, does not get there in
// time, or this node is outside the bound of its peers; the others go
// on. ok is false when no request is left.
func (p *proposer) admit(b *batch) (now int64, ok bool) {
	peerErr := error(nil)
	if p.rules.peers != nil {
		peerErr = p.rules.peers.Check()
	}
	leases := false
	for _, r := range b.reqs {
		leases = leases || grantsLease(r.cmds)
	}
	if !leases {
		return p.stamp(p.floor(), peerErr == nil), true
	}
	rule, err := rulePeers, peerErr
	if err == nil {
		if now, err = p.stampAtClock(); err == nil {
			return now, true
		}
		rule = ruleBehind
	}
	if errors.Is(err, ErrClosed) {
		for _, r := range b.reqs {
			fail(r, err)
		}
		return 0, false
	}
	p.refuseLeases(b, rule, err)
	if len(b.reqs) == 0 {
		return 0, false
	}
	return p.stamp(p.floor(), peerErr == nil), true
}

// stampAtClock returns the leader's clock as the stamp of an entry that
// grants leases, once it has reached the previous stamps: it waits up to
// the maximum offset for a clock behind them by no more than that.
func (p *proposer) stampAtClock() (int64, error) {
	var waitedFrom time.Time
	for {
		floor := p.floor()
		p.stampMu.Lock()
		clock, base := p.clock().UnixMilli(), max(p.lastStamp, floor)
		if clock >= base {
			p.lastStamp = clock
			p.stampMu.Unlock()
			return clock, nil
		}
		p.stampMu.Unlock()
		lag := time.Duration(base-clock) * time.Millisecond
		if lag > p.rules.maxOffset {
			return 0, behindError(lag, p.rules.maxOffset, false)
		}
		if waitedFrom.IsZero() {
			waitedFrom = time.Now()
			if m := p.rules.metrics; m != nil {
				m.LeaseWaits.Inc()
			}
		}
		left := p.rules.maxOffset - time.Since(waitedFrom)
		if left <= 0 {
			return 0, behindError(lag, p.rules.maxOffset, true)
		}
		t := time.NewTimer(min(lag, left, 10*time.Millisecond))
		select {
		case <-t.C:
		case <-p.quit:
			t.Stop()
			return 0, ErrClosed
		}
	}
}

// refuseLeases answers the requests of b that carry a Reserve or an
// Extend with the refusal err (under rule) and keeps the others in b.
func (p *proposer) refuseLeases(b *batch, rule string, err error) {
	refusal := &leaseRefusal{shard: p.rules.shard, err: err}
	kept := b.reqs[:0]
	var cmds []keyspace.Command
	for _, r := range b.reqs {
		if !grantsLease(r.cmds) {
			kept = append(kept, r)
			cmds = append(cmds, r.cmds...)
			continue
		}
		if m := p.rules.metrics; m != nil {
			m.LeaseRefusals.WithLabelValues(rule).Inc()
		}
		fail(r, refusal)
	}
	b.reqs, b.cmds = kept, cmds
}

// propose queues commands and waits for their results. When ctx ends first
// the outcome is unknown: the commands may still be applied.
func (p *proposer) propose(ctx context.Context, cmds []keyspace.Command, tick bool) ([]keyspace.Result, error) {
	req := &request{cmds: cmds, tick: tick, start: time.Now(), bytes: commandBytes(cmds), done: make(chan struct{})}
	p.closeMu.RLock()
	if p.closed {
		p.closeMu.RUnlock()
		return nil, ErrClosed
	}
	select {
	case p.in <- req:
	case <-ctx.Done():
		p.closeMu.RUnlock()
		return nil, ctx.Err()
	}
	p.closeMu.RUnlock()
	select {
	case <-req.done:
		return req.res, req.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	}
}

func (p *proposer) run(pending chan<- batch) {
	defer p.wg.Done()
	defer close(pending)
	var buf []byte
	var first *request
	for {
		if first == nil {
			select {
			case first = <-p.in:
			case <-p.quit:
				return
			}
		}
		select {
		case p.inflight <- struct{}{}:
		case <-p.quit:
			fail(first, ErrClosed)
			return
		}
		b, tick, next := p.gather(first)
		first = next
		now, ok := p.admit(&b)
		if !ok {
			<-p.inflight
			continue
		}
		entry := keyspace.Entry{Now: now, Tick: tick, HasPolicy: tick, Policy: *p.policy.Load(), HasLayout: true, Layout: p.layout, Commands: b.cmds}
		buf = keyspace.AppendEntry(buf[:0], &entry)
		// raft keeps the slice until the entry is stored: hand it a copy.
		b.proposed = time.Now()
		b.future = p.raft.Apply(append([]byte(nil), buf...), 0)
		pending <- b
	}
}

// gather takes first and whatever else is queued, up to maxCommands and
// about maxEntryBytes. A request that does not fit is returned to start the
// next entry.
func (p *proposer) gather(first *request) (b batch, tick bool, next *request) {
	b = batch{reqs: []*request{first}, cmds: first.cmds}
	tick = first.tick
	size := first.bytes
	for len(b.cmds) < p.maxCommands {
		select {
		case r := <-p.in:
			if len(b.cmds)+len(r.cmds) > p.maxCommands || size+r.bytes > maxEntryBytes {
				return b, tick, r
			}
			size += r.bytes
			if len(b.reqs) == 1 {
				// The first request's commands are its caller's: the
				// entry's grow in a slice of their own, once.
				b.cmds = append(make([]keyspace.Command, 0, 4*len(b.cmds)+len(r.cmds)), b.cmds...)
			}
			b.reqs = append(b.reqs, r)
			b.cmds = append(b.cmds, r.cmds...)
			tick = tick || r.tick
		default:
			return b, tick, nil
		}
	}
	return b, tick, nil
}

// complete waits for entries in log order and hands each request its results.
func (p *proposer) complete(pending <-chan batch) {
	defer p.wg.Done()
	for b := range pending {
		err := b.future.Error()
		<-p.inflight
		var res []keyspace.Result
		var a *applied
		if err == nil {
			if a, _ = b.future.Response().(*applied); a != nil {
				res = a.take()
			}
			if len(res) != len(b.cmds) {
				err = fmt.Errorf("shard: entry returned %d results for %d commands", len(res), len(b.cmds))
			}
		}
		if err != nil {
			err = raftError(err)
			for _, r := range b.reqs {
				fail(r, err)
			}
			continue
		}
		if p.observe != nil {
			p.observe(len(b.cmds), time.Since(b.reqs[0].start), res, b.cmds)
		}
		for _, r := range b.reqs {
			r.res, res = res[:len(r.cmds):len(r.cmds)], res[len(r.cmds):]
			close(r.done)
		}
		if p.stages != nil {
			p.stages(&b, a, time.Now())
		}
	}
}

func fail(r *request, err error) {
	r.err = err
	close(r.done)
}

func (p *proposer) close() {
	p.closeMu.Lock()
	p.closed = true
	p.closeMu.Unlock()
	close(p.quit)
	p.wg.Wait()
	for {
		select {
		case r := <-p.in:
			fail(r, ErrClosed)
		default:
			return
		}
	}
}

// raftError maps hashicorp/raft apply errors to the shard's sentinels: an
// entry refused before it reached the log is safe to retry elsewhere; one
// whose leader lost leadership afterwards may or may not commit.
func raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	default:
		return fmt.Errorf("shard: apply: %w", err)
	}
}

// maxEntryBytes bounds the encoded size of a log entry built from several
// requests (one request alone may exceed it; the API caps requests at 4 MiB).
const maxEntryBytes = 4 << 20

// commandBytes estimates the encoded size of cmds.
func commandBytes(cmds []keyspace.Command) int {
	n := 0
	for i := range cmds {
		n += 64 + len(cmds[i].Result)
	}
	return n
}
