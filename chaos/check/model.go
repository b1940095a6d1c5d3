package check

import (
	"fmt"
	"hash/maphash"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/client"
)

// Kind is the operation of an Input.
type Kind uint8

// The operations of the register. They are named Kind*, not Op*: their
// values are the history's own, not keyspace.Op's.
const (
	KindReserve Kind = iota + 1
	KindComplete
	KindFail
	KindExtend
	KindRelease
	KindGet
	KindForget
)

var kindNames = [...]string{"", "reserve", "complete", "fail", "extend", "release", "get", "forget"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Input is one operation on one key, as a client sent it. Durations are
// what the grid receives: whole milliseconds (see Millis). A zero Lease,
// Retention, MaxAttempts or RetryAfter means the grid's default, as on the
// wire.
type Input struct {
	Key  string
	Kind Kind
	// Token of Complete, Fail, Extend, Release.
	Token uint64
	// Lease of Reserve and Extend, ms.
	Lease int64
	// MaxAttempts of Reserve (the record keeps it from its grant).
	MaxAttempts int
	// Retention, ms: of the COMPLETED record (Complete), of the POISONED one
	// (Fail, and Reserve when a takeover poisons the key).
	Retention int64
	// RetryAfter of Fail, ms; Poison asks Fail to poison the key.
	RetryAfter int64
	Poison     bool
	// Result stored by Complete.
	Result string
	// Horizon is set by the Recorder on operations whose outcome is unknown:
	// the largest stamp any answer of the history carried. An operation
	// applied at a later stamp is observed by nobody, so the model evaluates
	// unknown operations at stamps up to Horizon only.
	Horizon int64
}

// The grid's defaults for a zero field (api/convert.go, keyspace/limits.go).
const (
	defaultLease       = int64(30 * time.Second / time.Millisecond)
	defaultRetention   = int64(7 * 24 * time.Hour / time.Millisecond) // Complete; Fail's and Reserve's poison retention too
	defaultMaxAttempts = 5
	backoffBase        = int64(time.Second / time.Millisecond)
	backoffMax         = int64(5 * time.Minute / time.Millisecond)
)

// withDefaults is in as the grid applies it: zero fields take the grid's
// defaults (a zero RetryAfter of Fail means the backoff by attempt, which
// depends on the record and is left to the transition).
func (in Input) withDefaults() Input {
	if in.Lease == 0 {
		in.Lease = defaultLease
	}
	if in.Retention == 0 {
		in.Retention = defaultRetention
	}
	if in.MaxAttempts == 0 {
		in.MaxAttempts = defaultMaxAttempts
	}
	return in
}

// backoff mirrors keyspace.Backoff: the retry delay after a failed attempt.
func backoff(attempt int) int64 {
	delay := backoffBase
	for i := 1; i < attempt && delay < backoffMax; i++ {
		delay *= 2
	}
	return min(delay, backoffMax)
}

// Output is the grid's answer, or Unknown when the client cannot tell
// whether the operation took effect (timeout, connection cut after send).
// Times are Unix milliseconds, 0 when unset.
type Output struct {
	Unknown  bool
	Outcome  client.Outcome
	State    client.State
	Token    uint64
	Attempt  int
	Deadline int64
	Now      int64
	Result   string
	Existed  bool
	// Cold tells that the cold tier held the record (client.TierCold), and
	// Cause why the outcome is unknown (the client's error): for people and
	// statistics; the model ignores both.
	Cold  bool
	Cause string
}

// OutputOf converts a client Result.
func OutputOf(r client.Result) Output {
	return Output{
		Outcome:  r.Outcome,
		State:    r.State,
		Token:    r.Token,
		Attempt:  r.Attempt,
		Deadline: unixMs(r.Deadline),
		Now:      unixMs(r.Now),
		Result:   string(r.Result),
		Existed:  r.Existed,
		Cold:     r.Tier == client.TierCold,
	}
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Millis is d as the grid receives it: whole milliseconds, a sub-millisecond
// remainder rounded up (client.millis).
func Millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// Register is the model's state of one key: the record of docs/design.md
// section 2 as far as the history tells it. Fields the history has not revealed yet
// (an operation with an unknown outcome granted a lease whose token nobody
// saw) are marked unknown and pinned by the first answer that shows them.
// Register is comparable: porcupine merges equal states with ==.
type Register struct {
	State client.State // StateAbsent when there is no record
	// Token of the record; 0 while not known (it is then above Floor).
	Token uint64
	// Floor is the largest token known to have been granted on the key: a
	// new grant must be above it (fencing tokens strictly increase).
	Floor       uint64
	Attempts    int
	MaxAttempts int
	// Deadline (Unix ms) of the record: exact when DeadlineExact, else a
	// lower bound (set by an operation applied at an unknown stamp).
	Deadline      int64
	DeadlineExact bool
	Result        string
	// Stamp is the largest stamp of an answered write on the key: writes are
	// applied in log order with non-decreasing stamps.
	Stamp int64
}

func (r Register) String() string {
	if r.State == client.StateAbsent {
		return fmt.Sprintf("ABSENT floor=%d", r.Floor)
	}
	tok := "?"
	if r.Token != 0 {
		tok = fmt.Sprint(r.Token)
	}
	dl := fmt.Sprint(r.Deadline)
	if !r.DeadlineExact {
		dl = ">=" + dl
	}
	s := fmt.Sprintf("%v tok=%s att=%d/%d dl=%s", r.State, tok, r.Attempts, r.MaxAttempts, dl)
	if r.Result != "" {
		s += fmt.Sprintf(" res=%q", r.Result)
	}
	return s
}

var absent = Register{State: client.StateAbsent}

// tokenMode says what an answer's token must be.
type tokenMode uint8

const (
	tokHidden tokenMode = iota // 0 on the wire (BUSY, LEASE_LOST, Get; ABSENT records)
	tokRecord                  // the record's token, pinned if unknown
	tokFresh                   // a new grant: above the floor
)

// answer is what the grid must answer for one transition; next is the state
// after it. Fields of next that depend on the answer (a fresh token, a
// deadline computed from an unknown stamp) are filled by observe.
type answer struct {
	outcome client.Outcome
	state   client.State
	tok     tokenMode
	attempt int
	result  string
	existed bool
	// dlRecord: the answer carries next's deadline (every state but ABSENT).
	dlRecord bool
}

type transition struct {
	next Register
	ans  answer
}

// at is the stamp an operation is evaluated at: exact when the answer is
// known (Output.Now), else somewhere in [lo, hi].
type at struct {
	now    int64
	known  bool
	lo, hi int64
}

// abandonAfter mirrors keyspace.AbandonAfter: a PROCESSING or FAILED record
// is kept that long past its deadline, then reads as ABSENT.
const abandonAfter = int64(7 * 24 * time.Hour / time.Millisecond)

// expired returns the possible truths of "the record's deadline has passed".
func (s Register) expired(t at) []bool { return s.past(t, 0) }

// past returns the possible truths of "deadline + extra <= now".
func (s Register) past(t at, extra int64) []bool {
	dl := s.Deadline + extra
	switch {
	case s.State == client.StateAbsent:
		return []bool{false}
	case t.known && s.DeadlineExact:
		return []bool{dl <= t.now}
	case t.known: // a lower bound
		if t.now < dl {
			return []bool{false}
		}
	case s.DeadlineExact:
		if dl <= t.lo {
			return []bool{true}
		}
		if dl > t.hi {
			return []bool{false}
		}
	default:
		if dl > t.hi {
			return []bool{false}
		}
	}
	return []bool{false, true}
}

// lookup is the record as an operation sees it: a COMPLETED or POISONED
// record past its deadline is ABSENT (keeping the token floor), and so is a
// PROCESSING or FAILED one abandonAfter past it (keyspace Record.gone).
func (s Register) lookup(t at) []Register {
	extra := int64(0)
	if s.State == client.StateProcessing || s.State == client.StateFailed {
		extra = abandonAfter
	}
	var out []Register
	for _, e := range s.past(t, extra) {
		if e {
			out = append(out, s.cleared())
		} else {
			out = append(out, s)
		}
	}
	return out
}

// cleared is the state with no record; the floor and stamp stay.
func (s Register) cleared() Register {
	return Register{State: client.StateAbsent, Floor: s.Floor, Stamp: s.Stamp}
}

// withDeadline sets the deadline now + d: exact when the stamp is known, a
// lower bound otherwise.
func (s Register) withDeadline(t at, d int64) Register {
	if t.known {
		s.Deadline, s.DeadlineExact = t.now+d, true
	} else {
		s.Deadline, s.DeadlineExact = t.lo+d, false
	}
	return s
}

// holds returns the possible truths of "the record's token is tok", with the
// state in which that is so (an unknown token pinned to tok).
func (s Register) holds(tok uint64) []struct {
	yes bool
	s   Register
} {
	type r = struct {
		yes bool
		s   Register
	}
	switch {
	case s.State == client.StateAbsent:
		return []r{{false, s}}
	case s.Token != 0:
		return []r{{s.Token == tok, s}}
	case tok <= s.Floor:
		return []r{{false, s}}
	}
	p := s
	p.Token, p.Floor = tok, tok
	return []r{{true, p}, {false, s}}
}

// extended is the state after an Extend by d at t: the deadline becomes
// max(deadline, now + d), exact when both are, a lower bound otherwise.
func (s Register) extended(t at, d int64) Register {
	n := s.withDeadline(t, d)
	n.Deadline = max(s.Deadline, n.Deadline)
	n.DeadlineExact = t.known && s.DeadlineExact
	return n
}

// view is the answer of an operation that leaves the record as it is.
func (s Register) view(o client.Outcome, hidden bool) answer {
	a := answer{outcome: o, state: s.State, attempt: s.Attempts, result: s.Result}
	if s.State != client.StateAbsent {
		a.dlRecord = true
		if !hidden {
			a.tok = tokRecord
		}
	}
	return a
}

// transitions lists what operation in can do to s at t: each a next state
// and the answer the grid gives. It implements the tables of docs/design.md
// section 2 (keyspace/*.go); it must stay in step with them.
func transitions(s Register, in Input, t at) []transition {
	in = in.withDefaults()
	var out []transition
	add := func(next Register, a answer) { out = append(out, transition{next, a}) }
	for _, rec := range s.lookup(t) {
		switch in.Kind {
		case KindReserve:
			reserve(rec, in, t, add)
		case KindComplete:
			for _, h := range rec.holds(in.Token) {
				r := h.s
				switch {
				case h.yes && r.State == client.StateProcessing:
					n := r.withDeadline(t, in.Retention)
					n.State, n.Result = client.StateCompleted, in.Result
					add(n, n.view(client.OutcomeOK, false))
				case h.yes && r.State == client.StateCompleted:
					add(r, r.view(client.OutcomeOK, false))
				default:
					add(r, r.view(client.OutcomeLeaseLost, true))
				}
			}
		case KindFail:
			for _, h := range rec.holds(in.Token) {
				r := h.s
				switch {
				case h.yes && (r.State == client.StateFailed || r.State == client.StatePoisoned):
					add(r, r.view(client.OutcomeOK, false))
				case h.yes && r.State == client.StateProcessing:
					var n Register
					if in.Poison || r.Attempts >= r.MaxAttempts {
						n = r.withDeadline(t, in.Retention)
						n.State = client.StatePoisoned
					} else {
						delay := in.RetryAfter
						if delay == 0 {
							delay = backoff(r.Attempts)
						}
						n = r.withDeadline(t, delay)
						n.State = client.StateFailed
					}
					add(n, n.view(client.OutcomeOK, false))
				default:
					add(r, r.view(client.OutcomeLeaseLost, true))
				}
			}
		case KindExtend:
			for _, h := range rec.holds(in.Token) {
				r := h.s
				if h.yes && r.State == client.StateProcessing {
					n := r.extended(t, in.Lease)
					add(n, n.view(client.OutcomeOK, false))
				} else {
					add(r, r.view(client.OutcomeLeaseLost, true))
				}
			}
		case KindRelease:
			if rec.State == client.StateAbsent {
				add(rec, rec.view(client.OutcomeOK, false))
				continue
			}
			for _, h := range rec.holds(in.Token) {
				r := h.s
				if h.yes && r.State == client.StateProcessing {
					n := r.cleared()
					add(n, n.view(client.OutcomeOK, false))
				} else {
					add(r, r.view(client.OutcomeLeaseLost, true))
				}
			}
		case KindGet:
			// A read changes nothing, not even by reclaiming an expired
			// record: a later write may be stamped below the read (a
			// ReadIndex read is stamped by the leader's clock). It shows
			// no token: a reader is not the holder.
			if rec.State == s.State {
				add(rec, rec.view(client.OutcomeOK, true))
			} else {
				add(s, rec.view(client.OutcomeOK, true))
			}
		case KindForget:
			n := rec.cleared()
			a := n.view(client.OutcomeOK, false)
			a.existed = rec.State != client.StateAbsent
			add(n, a)
		}
	}
	return out
}

// reserve is the Reserve table (keyspace/reserve.go) without entities and
// fingerprints, which the register does not model.
func reserve(r Register, in Input, t at, add func(Register, answer)) {
	grant := func(attempts int) {
		n := r.withDeadline(t, in.Lease)
		n.State, n.Token, n.Attempts, n.MaxAttempts, n.Result = client.StateProcessing, 0, attempts, in.MaxAttempts, ""
		a := n.view(client.OutcomeAcquired, false)
		a.tok = tokFresh
		add(n, a)
	}
	switch r.State {
	case client.StateAbsent:
		grant(1)
		return
	case client.StateCompleted:
		add(r, r.view(client.OutcomeDuplicate, false))
		return
	case client.StatePoisoned:
		add(r, r.view(client.OutcomePoisoned, false))
		return
	}
	// PROCESSING or FAILED.
	for _, e := range r.expired(t) {
		switch {
		case !e:
			add(r, r.view(client.OutcomeBusy, true))
		case r.Attempts >= in.MaxAttempts:
			// The takeover poisons the key under this command's new token.
			n := r.withDeadline(t, in.Retention)
			n.State, n.Token = client.StatePoisoned, 0
			a := n.view(client.OutcomePoisoned, false)
			a.tok = tokFresh
			add(n, a)
		default:
			grant(r.Attempts + 1)
		}
	}
}

// observe checks an answer against the grid's output and pins in next what
// the output reveals.
func observe(tr transition, out Output) (Register, bool) {
	a, n := tr.ans, tr.next
	if out.Outcome != a.outcome || out.State != a.state || out.Attempt != a.attempt ||
		out.Result != a.result || out.Existed != a.existed {
		return n, false
	}
	switch a.tok {
	case tokHidden:
		if out.Token != 0 {
			return n, false
		}
	case tokRecord:
		switch {
		case n.Token == out.Token:
		case n.Token == 0 && out.Token > n.Floor:
			n.Token, n.Floor = out.Token, out.Token
		default:
			return n, false
		}
	case tokFresh:
		if out.Token <= n.Floor {
			return n, false
		}
		n.Token, n.Floor = out.Token, out.Token
	}
	if !a.dlRecord {
		if out.Deadline != 0 {
			return n, false
		}
	} else if n.DeadlineExact {
		if out.Deadline != n.Deadline {
			return n, false
		}
	} else {
		if out.Deadline < n.Deadline {
			return n, false
		}
		n.Deadline, n.DeadlineExact = out.Deadline, true
	}
	return n, true
}

// isWrite reports whether the operation goes through the log as a write
// (its stamp is ordered with the other writes of the key).
func (k Kind) isWrite() bool { return k != KindGet }

// step is the nondeterministic step of the register.
func step(state, input, output any) []any {
	s, i, o := state.(Register), input.(Input), output.(Output)
	if o.Unknown {
		// Not applied (it may never be), or applied at some stamp in
		// [s.Stamp, Horizon] with an answer nobody saw.
		next := []any{s}
		t := at{lo: s.Stamp, hi: max(i.Horizon, s.Stamp)}
		for _, tr := range transitions(s, i, t) {
			n := tr.next
			if tr.ans.tok == tokFresh {
				n.Token = 0 // granted, not seen: above the floor
			}
			next = append(next, n)
		}
		return next
	}
	if i.Kind.isWrite() {
		if o.Now < s.Stamp {
			return nil
		}
		s.Stamp = o.Now
	}
	var next []any
	for _, tr := range transitions(s, i, at{now: o.Now, known: true}) {
		if n, ok := observe(tr, o); ok {
			next = append(next, n)
		}
	}
	return next
}

// Model is the porcupine model of the grid: one Register per key (the
// history is partitioned by Input.Key), nondeterministic where the grid may
// choose (a new token is any token above the key's earlier ones) and where
// the history does not tell (an operation with an unknown outcome may or may
// not have happened).
func Model() porcupine.Model {
	seed := maphash.MakeSeed()
	nm := porcupine.NondeterministicModel{
		Partition:      partitionByKey,
		PartitionEvent: partitionEventsByKey,
		Init:           func() []any { return []any{absent} },
		Step:           step,
		Hash: func(s any) uint64 {
			return maphash.Comparable(seed, s.(Register))
		},
		DescribeOperation: func(input, output any) string {
			return describe(input.(Input), output.(Output))
		},
		DescribeState: func(s any) string { return s.(Register).String() },
	}
	return nm.ToModel()
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range history {
		k := op.Input.(Input).Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func partitionEventsByKey(history []porcupine.Event) [][]porcupine.Event {
	keyOf := map[int]string{}
	byKey := map[string][]porcupine.Event{}
	var keys []string
	for _, ev := range history {
		if ev.Kind == porcupine.CallEvent {
			keyOf[ev.Id] = ev.Value.(Input).Key
		}
		k := keyOf[ev.Id]
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], ev)
	}
	out := make([][]porcupine.Event, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func describe(i Input, o Output) string {
	var call string
	switch i.Kind {
	case KindReserve:
		call = fmt.Sprintf("reserve(%s, lease=%dms, max=%d)", i.Key, i.Lease, i.MaxAttempts)
	case KindComplete:
		call = fmt.Sprintf("complete(%s, tok=%d, %q)", i.Key, i.Token, i.Result)
	case KindFail:
		call = fmt.Sprintf("fail(%s, tok=%d, retry=%dms, poison=%v)", i.Key, i.Token, i.RetryAfter, i.Poison)
	case KindExtend:
		call = fmt.Sprintf("extend(%s, tok=%d, lease=%dms)", i.Key, i.Token, i.Lease)
	case KindRelease:
		call = fmt.Sprintf("release(%s, tok=%d)", i.Key, i.Token)
	default:
		call = fmt.Sprintf("%v(%s)", i.Kind, i.Key)
	}
	if o.Unknown {
		return call + " -> unknown"
	}
	ans := fmt.Sprintf("%v %v tok=%d att=%d dl=%d now=%d", o.Outcome, o.State, o.Token, o.Attempt, o.Deadline, o.Now)
	if o.Result != "" {
		ans += fmt.Sprintf(" res=%q", o.Result)
	}
	if i.Kind == KindForget {
		ans += fmt.Sprintf(" existed=%v", o.Existed)
	}
	return call + " -> " + ans
}
