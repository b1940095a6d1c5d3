package keyspace

// State is the lifecycle state of a record (docs/design.md section 2). The
// numbering matches the wire protocol. Absent is never stored.
type State uint8

const (
	Absent State = iota + 1
	Processing
	Completed
	Failed
	Poisoned
)

var stateNames = [...]string{"", "ABSENT", "PROCESSING", "COMPLETED", "FAILED", "POISONED"}

func (s State) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return "STATE(?)"
}

// Record is the fixed-size state the hot table keeps for one digest: 24 bytes,
// 40 with its digest. Fingerprints, results, entity references and request
// ids live out of line (see State), flagged in Meta, so records without them
// pay nothing.
//
// Meta packs: bits 0-3 state, 4-7 flags, 8-15 attempts, 16-63 aux. Aux holds
// max attempts while PROCESSING or FAILED and the completed-at time (Unix ms)
// once COMPLETED or POISONED. A stored record always has a non-zero state, so
// Meta == 0 marks an empty table slot.
//
// Deadline (Unix ms) is the lease expiry (PROCESSING), retry-not-before
// (FAILED) or retention end (COMPLETED, POISONED).
type Record struct {
	Token    uint64
	Deadline int64
	Meta     uint64
}

// The four flag bits of Meta are all in use. A fifth kind of side data needs
// a bit from elsewhere in Meta (aux has room to spare), which changes the
// record layout of snapshots and of the cold tier.
const (
	flagFingerprint = 1 << 0
	flagResult      = 1 << 1
	flagEntity      = 1 << 2
	// flagRequestID: the reserve's request id (RequestIDHash) is kept in
	// the request id side map. Only PROCESSING records carry one.
	flagRequestID = 1 << 3

	auxMask = 1<<48 - 1
)

func makeMeta(s State, flags uint8, attempts uint8, aux uint64) uint64 {
	return uint64(s)&0xf | uint64(flags&0xf)<<4 | uint64(attempts)<<8 | (aux&auxMask)<<16
}

// State returns the record's state.
func (r Record) State() State { return State(r.Meta & 0xf) }

// Attempts is the number of leases granted since the record was created.
func (r Record) Attempts() uint8 { return uint8(r.Meta >> 8) }

func (r Record) flags() uint8 { return uint8(r.Meta>>4) & 0xf }

func (r Record) has(flag uint8) bool { return r.flags()&flag != 0 }

func (r Record) aux() uint64 { return r.Meta >> 16 }

// MaxAttempts is the attempt limit of a PROCESSING or FAILED record.
func (r Record) MaxAttempts() uint8 {
	if s := r.State(); s == Processing || s == Failed {
		return uint8(r.aux())
	}
	return 0
}

// CompletedAt is the settle time (Unix ms) of a COMPLETED or POISONED record.
func (r Record) CompletedAt() int64 {
	if s := r.State(); s == Completed || s == Poisoned {
		return int64(r.aux())
	}
	return 0
}

func (r *Record) setFlag(flag uint8, on bool) {
	f := r.flags()
	if on {
		f |= flag
	} else {
		f &^= flag
	}
	r.Meta = r.Meta&^(0xf<<4) | uint64(f)<<4
}

// settled reports whether the record is COMPLETED or POISONED.
func (r Record) settled() bool {
	s := r.State()
	return s == Completed || s == Poisoned
}

// gone reports whether the record no longer exists at now: a settled record
// past its retention is ABSENT, and a PROCESSING or FAILED record nobody came
// back for within AbandonAfter of its deadline is reclaimed.
func (r Record) gone(now int64) bool {
	if r.settled() {
		return r.Deadline <= now
	}
	return r.Deadline+AbandonAfter.Milliseconds() <= now
}
