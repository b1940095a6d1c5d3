package shard

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

// The clock rules of lease grants (doc.go, Time, states what they buy).

// MaxMaxClockOffset bounds the maximum clock offset setting: a bound at
// or past the longest lease would leave no lease a safe window (a
// holder's margin must be at least the bound).
const MaxMaxClockOffset = digest.MaxLease

// ValidateMaxClockOffset checks a maximum clock offset setting: 1 ms
// (stamps are in milliseconds) up to MaxMaxClockOffset.
func ValidateMaxClockOffset(d time.Duration) error {
	if d < time.Millisecond || d > MaxMaxClockOffset {
		return fmt.Errorf("shard: max clock offset %v out of range 1ms..%v (a holder's lease margin must cover it, so a bound past the longest lease leaves no lease a safe window)",
			d, MaxMaxClockOffset)
	}
	return nil
}

// PeerClocks is what a shard learns from its node's measurement of its
// clock against its peers' (cluster.ClockOffsets).
type PeerClocks interface {
	// Check is nil while this node's clock is within the maximum offset
	// of its peers' (or nothing says otherwise yet), else an error
	// wrapping ErrClockOffset that says by how much it is not.
	Check() error
	// Offset is peer's clock minus this node's, as last measured, and
	// whether a recent measurement exists.
	Offset(peer string) (time.Duration, bool)
}

// leaseRefusal is the refusal of a request carrying a Reserve or an
// Extend under the clock rules. It wraps the rule's error (an
// ErrClockOffset) and matches ErrNotLeader: nothing was applied, and the
// request belongs to another leader.
type leaseRefusal struct {
	shard uint64
	err   error
}

func (e *leaseRefusal) Error() string {
	return fmt.Sprintf("shard %d grants no lease on this leader (Reserve and Extend were refused, nothing was applied): %v", e.shard, e.err)
}

func (e *leaseRefusal) Unwrap() error { return e.err }

func (e *leaseRefusal) Is(target error) bool { return target == ErrNotLeader }

// Rules named in refusals and metrics.
const (
	ruleBehind = "behind_stamps" // the leader's clock is behind the shard's stamps
	rulePeers  = "peer_offset"   // the node's clock is off its peers'
)

// behindError is the refusal of a leader whose clock is lag behind the
// shard's latest stamp.
func behindError(lag, maxOffset time.Duration, waited bool) error {
	if waited {
		return fmt.Errorf("%w: this leader's clock is %v behind the shard's latest stamp and did not reach it within the maximum clock offset %v (a lease is only granted at the leader's own clock)",
			ErrClockOffset, lag, maxOffset)
	}
	return fmt.Errorf("%w: this leader's clock is %v behind the shard's latest stamp, more than the maximum clock offset %v",
		ErrClockOffset, lag, maxOffset)
}

// grantsLease reports whether cmds grant or renew a lease.
func grantsLease(cmds []keyspace.Command) bool {
	for i := range cmds {
		if cmds[i].Op == keyspace.OpReserve || cmds[i].Op == keyspace.OpExtend {
			return true
		}
	}
	return false
}

// StampLag is how far this replica's clock is behind the stamps it would
// have to stamp past: the latest applied stamp and, on a leader, its own
// latest stamp. Zero or negative when its clock is ahead.
func (s *Replica) StampLag() time.Duration {
	floor := s.appliedStamp()
	base, clock := s.prop.base(floor)
	return time.Duration(base-clock) * time.Millisecond
}

// clockRefusal is why this leader may not grant leases now, or nil:
// its node is outside the bound of its peers, or its clock is behind
// the stamps by more than the bound. (A lag within the bound only makes
// grants wait for the clock: see proposer.admit.)
func (s *Replica) clockRefusal() (rule string, err error) {
	if s.cfg.PeerClocks != nil {
		if err := s.cfg.PeerClocks.Check(); err != nil {
			return rulePeers, err
		}
	}
	if lag := s.StampLag(); lag > s.cfg.MaxClockOffset {
		return ruleBehind, behindError(lag, s.cfg.MaxClockOffset, false)
	}
	return "", nil
}

// handOverForClock gives the leadership to a voter that can grant leases,
// when this leader cannot (clockRefusal): with its node outside the bound
// of its peers, to any other voter (they are the majority it is off from);
// with its clock behind the stamps (its node within the bound of its
// peers, so that the stamps came from a clock that ran ahead), to the
// voter measured the most ahead of it among those within the bound of its
// clock, if that one would be within the bound of the stamps; a voter
// farther ahead would be the clock the majority disagrees with. Without
// such a voter, or without measurements (a node outside a cluster), it
// stays. Best effort: the next tick tries again.
func (s *Replica) handOverForClock(rule string, why error) {
	cf := s.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	var target raft.Server
	found, best := false, time.Duration(0)
	for _, srv := range cf.Configuration().Servers {
		if srv.Suffrage != raft.Voter || string(srv.ID) == s.cfg.NodeID {
			continue
		}
		if rule == rulePeers {
			target, found = srv, true
			break
		}
		if s.cfg.PeerClocks == nil {
			continue
		}
		off, ok := s.cfg.PeerClocks.Offset(string(srv.ID))
		// Its lag would be ours minus its offset: within the bound, it
		// grants (after a short wait at most).
		if ok && off.Abs() <= s.cfg.MaxClockOffset && s.StampLag()-off <= s.cfg.MaxClockOffset && (!found || off > best) {
			target, found, best = srv, true, off
		}
	}
	if found {
		s.handOverTo(target, "this leader may not grant leases", why)
	}
}
