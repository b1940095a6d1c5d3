package keyspace

import "bytes"

// Machine is the record state machine of one shard: the hot table, the
// out-of-line side data, the entity versions and the stamped clock.
//
// Machine is deterministic: the same entries applied in the same order with
// the same indexes give the same results and the same state on every
// replica. It reads no clock, does no I/O and starts no goroutines. It is not
// safe for concurrent use; the shard serialises Apply and reads.
type Machine struct {
	table        *Table
	fingerprints map[Digest]uint64
	results      map[Digest][]byte
	pending      map[Digest]entityRef // reserve's entity of a PROCESSING or FAILED record
	entities     map[Digest]entityVersion

	now    int64 // latest stamp applied (Unix ms)
	cursor uint64
	ticks  uint64
	counts [Poisoned + 1]int64
	stats  Stats
}

type entityRef struct {
	entity  Digest
	version uint64
}

type entityVersion struct {
	version  uint64
	deadline int64
}

// Stats are cumulative counters of events inside the state machine. They are
// replicated state (every replica counts the same) but not snapshotted.
type Stats struct {
	LeasesExpired uint64 // takeovers of an expired PROCESSING lease
	Reclaimed     uint64 // records removed by the expiry sweep
	Forgotten     uint64
}

// NewMachine returns an empty state machine.
func NewMachine() *Machine {
	return &Machine{
		table:        NewTable(),
		fingerprints: make(map[Digest]uint64),
		results:      make(map[Digest][]byte),
		pending:      make(map[Digest]entityRef),
		entities:     make(map[Digest]entityVersion),
	}
}

// Now is the latest stamp applied (Unix ms).
func (m *Machine) Now() int64 { return m.now }

// Len is the number of records held, expired ones not yet reclaimed included.
func (m *Machine) Len() int { return m.table.Len() }

// Count is the number of held records in state s.
func (m *Machine) Count(s State) int64 {
	if s >= Processing && s <= Poisoned {
		return m.counts[s]
	}
	return 0
}

// Stats returns the cumulative event counters.
func (m *Machine) Stats() Stats { return m.stats }

// HotBytes is the memory held by the hot table's slots.
func (m *Machine) HotBytes() int { return m.table.Bytes() }

// Apply applies one committed entry at the given Raft index and appends one
// Result per command to out. The stamp never moves backwards: the entry is
// evaluated at max(previous stamp, e.Now). The fencing token of the command
// at position i is index<<16 | i, strictly increasing per shard.
func (m *Machine) Apply(index uint64, e *Entry, out []Result) []Result {
	if e.Now > m.now {
		m.now = e.Now
	}
	now := m.now
	if e.Tick {
		m.sweep(now)
	}
	for i := range e.Commands {
		out = append(out, m.apply(&e.Commands[i], now, index<<16|uint64(i)))
	}
	return out
}

func (m *Machine) apply(c *Command, now int64, token uint64) Result {
	switch c.Op {
	case OpReserve:
		return m.reserve(c, now, token)
	case OpComplete:
		return m.complete(c, now)
	case OpFail:
		return m.fail(c, now)
	case OpRelease:
		return m.release(c, now)
	case OpExtend:
		return m.extend(c, now)
	case OpForget:
		return m.forget(c, now)
	case OpGet:
		return m.Get(c.Digest, now)
	default:
		return Result{Outcome: OutcomeIgnored, State: Absent, Now: now}
	}
}

// lookup returns the live record of d, reclaiming it first if it is gone.
func (m *Machine) lookup(d Digest, now int64) (Record, bool) {
	r, ok := m.table.Get(d)
	if ok && r.gone(now) {
		m.remove(d, r)
		return Record{}, false
	}
	return r, ok
}

// put stores r for d, replacing old (if had) and keeping counts.
func (m *Machine) put(d Digest, old Record, had bool, r Record) {
	if had {
		m.counts[old.State()]--
	}
	m.counts[r.State()]++
	m.table.Put(d, r)
}

// remove deletes d's record and all its side data.
func (m *Machine) remove(d Digest, r Record) {
	m.table.Delete(d)
	m.dropSide(d, r)
}

func (m *Machine) dropSide(d Digest, r Record) {
	m.counts[r.State()]--
	if r.has(flagFingerprint) {
		delete(m.fingerprints, d)
	}
	if r.has(flagResult) {
		delete(m.results, d)
	}
	if r.has(flagEntity) {
		delete(m.pending, d)
	}
}

// view builds the Result of an outcome from the record as it now stands.
func (m *Machine) view(o Outcome, d Digest, r Record, had bool, now int64) Result {
	res := Result{Outcome: o, State: Absent, Now: now}
	if !had {
		return res
	}
	res.State = r.State()
	res.Token = r.Token
	if o == OutcomeBusy || o == OutcomeLeaseLost || o == OutcomeMismatch || o == OutcomeStale {
		// The current holder's token is its own: never hand it to a caller
		// that does not hold the lease, who could settle it with it.
		res.Token = 0
	}
	res.Attempt = r.Attempts()
	res.Deadline = r.Deadline
	res.CompletedAt = r.CompletedAt()
	if r.has(flagResult) {
		res.Result = m.results[d]
	}
	if r.has(flagFingerprint) {
		res.HasFingerprint, res.Fingerprint = true, m.fingerprints[d]
	}
	return res
}

// setResult stores or clears the out-of-line result of a record being written.
func (m *Machine) setResult(d Digest, r *Record, result []byte) {
	if len(result) == 0 {
		if r.has(flagResult) {
			delete(m.results, d)
			r.setFlag(flagResult, false)
		}
		return
	}
	m.results[d] = bytes.Clone(result)
	r.setFlag(flagResult, true)
}

// settle turns a record into a COMPLETED or POISONED one at now.
func settle(r Record, s State, now, retention int64) Record {
	return Record{
		Token:    r.Token,
		Deadline: now + retention,
		Meta:     makeMeta(s, r.flags(), r.Attempts(), uint64(now)),
	}
}

// dropPending forgets the reserve's entity reference of a record, returning it.
func (m *Machine) dropPending(d Digest, r *Record) (entityRef, bool) {
	if !r.has(flagEntity) {
		return entityRef{}, false
	}
	ref := m.pending[d]
	delete(m.pending, d)
	r.setFlag(flagEntity, false)
	return ref, true
}
