package keyspace

import (
	"bytes"

	"github.com/l4xg/grid/digest"
)

// Machine is the record state machine of one shard: the hot table, the
// out-of-line side data, the entity versions and the stamped clock.
//
// Machine is deterministic: the same entries applied in the same order with
// the same indexes give the same results and the same state on every
// replica. It reads no clock, does no I/O and starts no goroutines. It is not
// safe for concurrent use; the shard serialises Apply and reads.
type Machine struct {
	table        *Table
	fingerprints sideMap[uint64]
	results      sideMap[[]byte]
	pending      sideMap[entityRef] // reserve's entity of a PROCESSING or FAILED record
	requestIDs   sideMap[uint64]    // reserve's RequestIDHash of a PROCESSING record
	entities     sideMap[entityVersion]
	expiring     entityHeap // entity deadlines, for a bounded sweep
	resultBytes  int64      // sum of len(results)

	cold    ColdTier   // nil: no lower tier, records stay hot until gone
	coldHit coldLookup // the cold record the current command looked up
	found   bool       // the current settle found a record of its key (held, view)
	policy  TierPolicy

	// placements is set while an entry with a token layout is applied:
	// its settles find their key under any slot bits (held).
	placements bool

	now    int64  // latest stamp applied (Unix ms)
	touch  uint64 // what prefetch read, so the reads are not optimized away
	cursor uint64
	ticks  uint64
	counts [Poisoned + 1]int64
	stats  Stats
}

// coldLookup remembers, for the command being applied, the record lookup
// found in the cold tier, so its out-of-line data is at hand and removing it
// goes to the right tier.
type coldLookup struct {
	d   digest.Digest
	rec ColdRecord
	ok  bool
}

type entityRef struct {
	entity  digest.Digest
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
	Demoted       uint64 // records moved to the cold tier
	Evicted       uint64 // of those, demoted early because the hot tier was over budget
	Purged        uint64 // cold records removed at their retention end
}

// NewMachine returns an empty state machine without a cold tier.
func NewMachine() *Machine {
	return &Machine{table: NewTable(), policy: TierPolicy{HotWindow: DefaultHotWindow}}
}

// UseCold makes c the machine's cold tier. Call it before the first Apply
// (or right after ReadSnapshot), with a tier that holds exactly the records
// this machine demoted: every replica must use one, or none.
func (m *Machine) UseCold(c ColdTier) { m.cold = c }

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

// HotLiveBytes is what the hot tier's budget counts: a table slot per
// record plus the out-of-line results. Table slack (its load factor and
// growth) comes on top.
func (m *Machine) HotLiveBytes() int64 {
	side := m.fingerprints.len() + m.pending.len() + m.requestIDs.len()
	return int64(m.table.Len()*tabSlotSize) + m.resultBytes + int64(side)*sideEntryBytes
}

// Policy is the tiering policy in force, as the last tick set it.
func (m *Machine) Policy() TierPolicy { return m.policy }

// Apply applies one committed entry at the given Raft index and appends one
// Result per command to out. The stamp never moves backwards: the entry is
// evaluated at max(previous stamp, e.Now). The fencing token of the command
// at position i is e.Layout.Token(index, i) (the zero layout,
// index<<16 | i, for an entry without one), strictly increasing per shard.
func (m *Machine) Apply(index uint64, e *Entry, out []Result) []Result {
	if e.Now > m.now {
		m.now = e.Now
	}
	now := m.now
	if e.Tick {
		if e.HasPolicy {
			m.policy = e.Policy
		}
		m.sweep(now)
	}
	var tokens digest.TokenLayout
	if e.HasLayout {
		tokens = e.Layout
	}
	m.placements = e.HasLayout
	for i := range e.Commands {
		if i%prefetchChunk == 0 && len(e.Commands) >= prefetchFrom {
			m.prefetch(e.Commands[i:min(i+prefetchChunk, len(e.Commands))])
		}
		out = append(out, m.apply(&e.Commands[i], now, tokens.Token(index, i)))
		m.coldHit, m.found = coldLookup{}, false
	}
	return out
}

// prefetchFrom is the smallest entry whose slots prefetch reads ahead: from
// two commands on, their misses overlap (BenchmarkMachineReserve and
// BenchmarkMachineLifecycle gain 10-17 % at 4 and at 100 commands an entry).
const prefetchFrom = 2

// prefetchChunk is how many commands' slots prefetch reads at a time: an
// entry carries up to thousands of commands, whose slots read all at once
// would leave the first level of cache before their commands came.
const prefetchChunk = 32

// prefetch reads the hot table's home slot of every command's key, and the
// request id map's (a reserve carrying one writes there, a settle of a key
// holding one deletes there), before the commands are applied
// (prefetchChunk at a time). In a large table each of those is a cache
// miss; applied one by one, each command waits for its own, while these
// reads do not depend on each other and the processor overlaps them.
// Nothing is decided by what they read.
func (m *Machine) prefetch(cs []Command) {
	var sum uint64
	ids := m.requestIDs.len() > 0
	for i := range cs {
		c := &cs[i]
		sum += m.table.touch(c.Digest)
		if ids || c.HasRequestID {
			sum += m.requestIDs.touch(c.Digest)
		}
	}
	m.touch += sum
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
		return m.Get(c.Digest, now, c.ShowToken)
	default:
		return Result{Outcome: OutcomeIgnored, State: Absent, Now: now}
	}
}

// lookup returns the live record of d from the hot table, else from the
// cold tier (remembered in m.coldHit), reclaiming it first if it is gone.
func (m *Machine) lookup(d digest.Digest, now int64) (Record, bool) {
	r, ok := m.table.Get(d)
	if ok {
		if r.gone(now) {
			m.remove(d, r)
			return Record{}, false
		}
		return r, true
	}
	if m.cold == nil {
		return Record{}, false
	}
	cr, ok := m.cold.Get(d)
	if !ok {
		return Record{}, false
	}
	if cr.gone(now) {
		m.cold.Delete(d)
		return Record{}, false
	}
	cr.Result = bytes.Clone(cr.Result)
	m.coldHit = coldLookup{d: d, rec: cr, ok: true}
	return cr.Record, true
}

// inCold reports whether d's record, as lookup found it, is a cold one.
func (m *Machine) inCold(d digest.Digest) bool { return m.coldHit.ok && m.coldHit.d == d }

// put stores r for d in the hot table, replacing old (if had) and keeping
// counts. A record replacing a cold one leaves the cold tier.
func (m *Machine) put(d digest.Digest, old Record, had bool, r Record) {
	if had && m.inCold(d) {
		m.cold.Delete(d)
		m.coldHit = coldLookup{}
		had = false
	}
	if had {
		m.counts[old.State()]--
	}
	m.counts[r.State()]++
	m.table.Put(d, r)
}

// remove deletes d's record and all its side data, from whichever tier.
func (m *Machine) remove(d digest.Digest, r Record) {
	if m.inCold(d) {
		m.cold.Delete(d)
		m.coldHit = coldLookup{}
		return
	}
	m.table.Delete(d)
	m.dropSide(d, r)
}

func (m *Machine) dropSide(d digest.Digest, r Record) {
	m.counts[r.State()]--
	if r.has(flagFingerprint) {
		m.fingerprints.del(d)
	}
	if r.has(flagResult) {
		m.dropResult(d)
	}
	if r.has(flagEntity) {
		m.pending.del(d)
	}
	if r.has(flagRequestID) {
		m.requestIDs.del(d)
	}
}

func (m *Machine) dropResult(d digest.Digest) {
	if old, ok := m.results.get(d); ok {
		m.resultBytes -= int64(len(old))
		m.results.del(d)
	}
}

// fingerprint returns the stored payload fingerprint of d's record.
func (m *Machine) fingerprint(d digest.Digest) uint64 {
	if m.inCold(d) {
		return m.coldHit.rec.Fingerprint
	}
	fp, _ := m.fingerprints.get(d)
	return fp
}

// result returns the stored result of d's record.
func (m *Machine) result(d digest.Digest) []byte {
	if m.inCold(d) {
		return m.coldHit.rec.Result
	}
	res, _ := m.results.get(d)
	return res
}

// view builds the Result of an outcome from the record as it now stands;
// a settle's says whether held found a record of its key (Result.Found).
func (m *Machine) view(o Outcome, d digest.Digest, r Record, had bool, now int64) Result {
	res := Result{Outcome: o, State: Absent, Now: now, Found: m.found}
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
		res.Result = m.result(d)
	}
	if r.has(flagFingerprint) {
		res.HasFingerprint, res.Fingerprint = true, m.fingerprint(d)
	}
	res.Cold = m.inCold(d)
	return res
}

// setResult stores or clears the out-of-line result of a record being written.
func (m *Machine) setResult(d digest.Digest, r *Record, result []byte) {
	if r.has(flagResult) {
		m.dropResult(d)
		r.setFlag(flagResult, false)
	}
	if len(result) == 0 {
		return
	}
	m.results.set(d, bytes.Clone(result))
	m.resultBytes += int64(len(result))
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

// dropRequestID forgets the request id of a record leaving PROCESSING: only
// a lease in force answers its own reserve again (see reserve).
func (m *Machine) dropRequestID(d digest.Digest, r *Record) {
	if r.has(flagRequestID) {
		m.requestIDs.del(d)
		r.setFlag(flagRequestID, false)
	}
}

// dropPending forgets the reserve's entity reference of a record, returning it.
func (m *Machine) dropPending(d digest.Digest, r *Record) (entityRef, bool) {
	if !r.has(flagEntity) {
		return entityRef{}, false
	}
	ref, _ := m.pending.get(d)
	m.pending.del(d)
	r.setFlag(flagEntity, false)
	return ref, true
}
