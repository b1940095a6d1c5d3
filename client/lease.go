package client

import (
	"fmt"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
)

// The local safe deadline: the one rule of how long a holder trusts a
// lease by its own clock, for manual Reserve and Extend results (Batch
// included) and for Process.

// DefaultLeaseMargin is the margin of a lease without WithLeaseMargin:
// lease/10, at least digest.DefaultMaxClockOffset (250 ms, the grid's
// default bound on clock offsets), and at most lease/2 so that a short
// lease keeps half of itself. A lease shorter than twice the maximum clock
// offset (500 ms by default) therefore gets a margin below that offset, and
// less protection against clock skew than longer leases.
func DefaultLeaseMargin(lease time.Duration) time.Duration {
	return min(max(lease/10, digest.DefaultMaxClockOffset), lease/2)
}

// LeaseMarginOption is the option made by WithLeaseMargin.
type LeaseMarginOption time.Duration

// WithLeaseMargin sets how long before the lease's end, by the client's
// clock, the holder stops trusting it (default DefaultLeaseMargin of the
// lease). It covers clock skew between the client and the grid, and the
// grid's own offset between nodes; it must be at least 0 and below the
// lease. Reserve, Extend (Result.SafeUntil) and Process (when its handler's
// context is cancelled).
func WithLeaseMargin(d time.Duration) LeaseMarginOption { return LeaseMarginOption(d) }

func (o LeaseMarginOption) applyProcess(p *processConfig) {
	p.margin, p.hasMargin = time.Duration(o), true
}
func (LeaseMarginOption) applyReserve(*gridpb.ReserveRequest) {} // the margin stays in the client
func (LeaseMarginOption) applyExtend(*gridpb.ExtendRequest)   {}

var (
	_ ReserveOption = LeaseMarginOption(0)
	_ ExtendOption  = LeaseMarginOption(0)
)

// leaseMargin resolves the margin of a lease: the one set with
// WithLeaseMargin, or the default. It refuses a margin that is negative
// (the holder would trust the lease past its end) or not below the lease.
func leaseMargin(lease time.Duration, set bool, margin time.Duration) (time.Duration, error) {
	if !set {
		return DefaultLeaseMargin(lease), nil
	}
	if margin < 0 || margin >= lease {
		return 0, fmt.Errorf("%w: lease margin %v must be at least 0 and below the lease %v", ErrInvalidArgument, margin, lease)
	}
	return margin, nil
}

// safeUntil is the local safe deadline of a lease that the grid granted or
// extended in its answer r, for a call whose first send the client's clock
// put at start: start + (r.Deadline - r.Now) - margin. It is zero when r
// holds no lease (r is not an ACQUIRED Reserve or an OK Extend).
//
// The remaining lease is taken from the answer, as the grid's deadline
// minus the stamp it evaluated the operation at, never from the lease
// asked for and never as the grid's deadline itself: the grid's clock is
// not the client's. The answer was evaluated after the call's first send
// left, so the grid's deadline is at least start + remaining by any clock
// that agrees with the grid's, and the margin covers the offset between
// them. For a fresh grant the remaining lease is the lease.
//
// A replayed grant (Result.Replayed: a resent Reserve got its own earlier
// grant back) has less left than the lease, and its deadline runs from the
// earlier grant, which may even precede this call (a caller's request id
// reused after a restart). Taking start + the lease would then trust the
// lease past its end; start + what remains never does, and costs at most
// the time between the call's first send and the send that was answered.
// The same holds for an Extend, whatever deadline the grid chose.
//
// An answer without a deadline or a stamp (a server older than the
// contract) falls back to the lease asked for.
func safeUntil(start time.Time, r Result, asked, margin time.Duration) time.Time {
	remaining := asked
	if !r.Deadline.IsZero() && !r.Now.IsZero() {
		remaining = r.Deadline.Sub(r.Now)
	}
	return start.Add(remaining - margin)
}

// holdsLease reports an answer that grants or renews the caller's lease.
func holdsLease(op *gridpb.Op, r Result) bool {
	switch op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		return r.Outcome == OutcomeAcquired
	case *gridpb.Op_Extend:
		return r.Outcome == OutcomeOK
	}
	return false
}

// askedLease is the lease an operation asks for: the server's default when
// it names none.
func askedLease(op *gridpb.Op) time.Duration {
	ms := op.LeaseMs()
	if ms <= 0 {
		return digest.DefaultLease
	}
	return time.Duration(ms) * time.Millisecond
}
