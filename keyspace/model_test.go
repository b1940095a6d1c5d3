package keyspace

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/l4xg/grid/digest"
	"pgregory.net/rapid"
)

// This file checks the Machine against a reference model written from
// docs/design.md sections 2 and 3, not from the code: a map from key to its
// record plus the entity versions. Where the design is silent the model
// follows the choices the package documents: PROCESSING and FAILED records
// are dropped AbandonAfter past their deadline; an entity's committed version
// lasts as long as the longest retention of the records that raised it;
// Release of a key nobody holds answers OK; the retention of a record
// poisoned by Reserve or Fail is the command's Retention; a takeover keeps
// the record's fingerprint if it has one; a reserve carrying the request id
// of the lease in force answers that grant again unless its fingerprint
// differs (then it is judged as any other reserve); Extend never shortens a
// lease; Get shows no token unless asked for the operator view. The model
// also tracks which expired records the machine still holds (they are
// reclaimed on lookup and by a Tick, which sweeps a table this small in one
// pass), so Len and Count are compared exactly.

const (
	mdlKeys      = 6 // keys 0..2 plain, 3 and 4 of entity 0, 5 of entity 1
	mdlNamespace = "m"
)

var mdlAbandon = AbandonAfter.Milliseconds()

func mdlEntityOf(key int) int {
	switch key {
	case 3, 4:
		return 0
	case 5:
		return 1
	}
	return -1
}

func mdlEntityName(e int) []byte { return fmt.Appendf(nil, "order-%d", e) }

func mdlDigest(key int) digest.Digest {
	var entity []byte
	if e := mdlEntityOf(key); e >= 0 {
		entity = mdlEntityName(e)
	}
	return digest.Record(mdlNamespace, fmt.Appendf(nil, "key-%d", key), entity)
}

type mdlRec struct {
	state       State
	token       uint64
	attempts    uint8
	max         uint8
	deadline    int64
	completedAt int64
	hasFP       bool
	fp          uint64
	result      []byte
	hasEntity   bool
	entity      int
	version     uint64
	hasReq      bool // the request id of the reserve granted the lease in force
	req         uint64
}

type mdlEntity struct {
	version  uint64
	deadline int64
}

type mdlStats struct{ leasesExpired, reclaimed, forgotten uint64 }

type mdl struct {
	seen     map[string]int // branches taken, for the coverage check
	now      int64
	recs     map[int]*mdlRec // held, possibly past their end
	entities map[int]mdlEntity
	stats    mdlStats
	tokens   mdlTokens
}

func newMdl() *mdl {
	return &mdl{recs: make(map[int]*mdlRec), entities: make(map[int]mdlEntity)}
}

// gone: a settled record past its retention is ABSENT; a PROCESSING or FAILED
// record is dropped AbandonAfter past its deadline.
func (r *mdlRec) gone(now int64) bool {
	if r.state == Completed || r.state == Poisoned {
		return r.deadline <= now
	}
	return r.deadline+mdlAbandon <= now
}

func (m *mdl) saw(branch string) {
	if m.seen != nil {
		m.seen[branch]++
	}
}

func (m *mdl) lookup(k int, now int64) *mdlRec {
	r := m.recs[k]
	if r != nil && r.gone(now) {
		delete(m.recs, k)
		return nil
	}
	return r
}

func (m *mdl) view(o Outcome, r *mdlRec, now int64) Result {
	res := Result{Outcome: o, State: Absent, Now: now}
	if r == nil {
		return res
	}
	res.State, res.Token, res.Attempt, res.Deadline = r.state, r.token, r.attempts, r.deadline
	switch o {
	case OutcomeBusy, OutcomeLeaseLost, OutcomeMismatch, OutcomeStale:
		res.Token = 0 // the holder's token is never handed to anyone else
	}
	if r.state == Completed || r.state == Poisoned {
		res.CompletedAt = r.completedAt
	}
	if r.state == Completed && len(r.result) > 0 {
		res.Result = r.result
	}
	res.HasFingerprint, res.Fingerprint = r.hasFP, r.fp
	if !r.hasFP {
		res.Fingerprint = 0
	}
	return res
}

// mdlBackoff: 1 s doubled per attempt after the first, at most 5 min.
func mdlBackoff(attempt uint8) int64 {
	d := int64(1000)
	for i := 1; i < int(attempt); i++ {
		d *= 2
		if d >= 300_000 {
			return 300_000
		}
	}
	return d
}

// mdlTokens is the model's token layout (docs/design.md sections 1 and 3): the
// index and position, shifted left by bits, the shard in the low bits.
type mdlTokens struct {
	shard uint64
	bits  uint8
}

func (l mdlTokens) token(index uint64, pos int) uint64 {
	return (index<<16|uint64(pos))<<l.bits | l.shard
}

func (m *mdl) apply(e *Entry, index uint64, keys []int) []Result {
	m.now = max(m.now, e.Now)
	now := m.now
	if e.Tick {
		for k, r := range m.recs {
			if r.gone(now) {
				delete(m.recs, k)
				m.stats.reclaimed++
				m.saw("reclaimed-by-tick")
			}
		}
	}
	out := make([]Result, len(e.Commands))
	for i := range e.Commands {
		out[i] = m.command(&e.Commands[i], keys[i], now, m.tokens.token(index, i))
	}
	return out
}

func (m *mdl) command(c *Command, k int, now int64, token uint64) Result {
	switch c.Op {
	case OpComplete, OpFail, OpRelease, OpExtend:
		// A settle says whether it found a record of its key.
		found := m.lookup(k, now) != nil
		res := m.op(c, k, now, token)
		res.Found = found
		return res
	}
	return m.op(c, k, now, token)
}

func (m *mdl) op(c *Command, k int, now int64, token uint64) Result {
	switch c.Op {
	case OpReserve:
		return m.reserve(c, k, now, token)
	case OpComplete:
		r := m.lookup(k, now)
		switch {
		case r != nil && r.token == c.Token && r.state == Processing:
			r.state, r.deadline, r.completedAt = Completed, now+c.Retention, now
			r.result = bytes.Clone(c.Result)
			m.saw("complete")
			if r.hasEntity {
				ev, ok := m.entities[r.entity]
				if ok && ev.deadline > now {
					ev = mdlEntity{max(ev.version, r.version), max(ev.deadline, r.deadline)}
				} else {
					ev = mdlEntity{r.version, r.deadline}
				}
				m.entities[r.entity] = ev
				r.hasEntity = false
			}
			return m.view(OutcomeOK, r, now)
		case r != nil && r.token == c.Token && r.state == Completed:
			m.saw("complete-retry")
			res := m.view(OutcomeOK, r, now)
			res.Repeated = true
			return res
		}
		return m.view(OutcomeLeaseLost, r, now)
	case OpFail:
		r := m.lookup(k, now)
		if r == nil || r.token != c.Token {
			return m.view(OutcomeLeaseLost, r, now)
		}
		switch r.state {
		case Failed, Poisoned:
			m.saw("fail-retry")
			res := m.view(OutcomeOK, r, now)
			res.Repeated = true
			return res
		case Completed:
			return m.view(OutcomeLeaseLost, r, now)
		}
		if c.Poison || r.attempts >= r.max {
			m.poison(r, now, c.Retention)
			m.saw("fail->POISONED")
		} else {
			m.saw("fail->FAILED")
			delay := mdlBackoff(r.attempts)
			if c.HasRetryAfter {
				delay = c.RetryAfter
			}
			r.state, r.deadline = Failed, now+delay
		}
		return m.view(OutcomeOK, r, now)
	case OpRelease:
		r := m.lookup(k, now)
		switch {
		case r == nil:
			return m.view(OutcomeOK, nil, now)
		case r.token == c.Token && r.state == Processing:
			delete(m.recs, k)
			m.saw("release")
			return m.view(OutcomeOK, nil, now)
		}
		return m.view(OutcomeLeaseLost, r, now)
	case OpExtend:
		r := m.lookup(k, now)
		if r == nil || r.token != c.Token || r.state != Processing {
			return m.view(OutcomeLeaseLost, r, now)
		}
		if now+c.Lease < r.deadline {
			m.saw("extend-kept-longer-lease")
		}
		r.deadline = max(r.deadline, now+c.Lease)
		m.saw("extend")
		return m.view(OutcomeOK, r, now)
	case OpGet:
		return m.get(k, now, c.ShowToken)
	case OpForget:
		r := m.lookup(k, now)
		delete(m.recs, k)
		if r != nil {
			m.stats.forgotten++
			m.saw("forget-existed")
		}
		res := m.view(OutcomeOK, nil, now)
		res.Existed = r != nil
		return res
	}
	return Result{Outcome: OutcomeIgnored, State: Absent, Now: now}
}

func (m *mdl) poison(r *mdlRec, now, retention int64) {
	r.state, r.deadline, r.completedAt = Poisoned, now+retention, now
	r.hasEntity = false
}

func (m *mdl) reserve(c *Command, k int, now int64, token uint64) Result {
	r := m.lookup(k, now)
	if r != nil && r.state == Processing && r.deadline > now && c.HasRequestID && r.hasReq && r.req == c.RequestID &&
		!(c.HasFingerprint && r.hasFP && r.fp != c.Fingerprint) {
		m.saw("replayed")
		if c.HasEntity {
			if ev, ok := m.entities[mdlEntityOf(k)]; ok && ev.deadline > now && c.Version <= ev.version {
				// Rare in random histories; testdata/machine/reserve-replay
				// has it by construction.
				m.saw("replayed-past-stale")
			}
		}
		res := m.view(OutcomeAcquired, r, now)
		res.Replayed = true
		return res
	}
	if c.HasEntity {
		if ev, ok := m.entities[mdlEntityOf(k)]; ok && ev.deadline > now && c.Version <= ev.version {
			if r != nil {
				m.saw("stale-on-record")
			}
			return m.view(OutcomeStale, r, now)
		}
	}
	if r != nil && c.HasFingerprint && r.hasFP && r.fp != c.Fingerprint {
		return m.view(OutcomeMismatch, r, now)
	}
	if r == nil {
		r = &mdlRec{}
		m.recs[k] = r
		m.grant(r, c, k, now, token)
		return m.view(OutcomeAcquired, r, now)
	}
	switch r.state {
	case Completed:
		return m.view(OutcomeDuplicate, r, now)
	case Poisoned:
		return m.view(OutcomePoisoned, r, now)
	}
	if r.deadline > now {
		res := m.view(OutcomeBusy, r, now)
		res.RetryAfter = r.deadline - now
		return res
	}
	expired := r.state == Processing
	if expired {
		m.stats.leasesExpired++
		m.saw("lease-expired")
	}
	var res Result
	if r.attempts >= c.MaxAttempts {
		m.saw("poisoned-on-takeover")
		m.poison(r, now, c.Retention)
		r.token = token // the poisoning takeover supersedes the old holder
		res = m.view(OutcomePoisoned, r, now)
	} else {
		m.saw("took-over")
		m.grant(r, c, k, now, token)
		res = m.view(OutcomeAcquired, r, now)
	}
	res.TookOver, res.LeaseExpired = true, expired
	return res
}

func (m *mdl) grant(r *mdlRec, c *Command, k int, now int64, token uint64) {
	r.state, r.token, r.attempts, r.max = Processing, token, r.attempts+1, c.MaxAttempts
	r.deadline, r.completedAt, r.result = now+c.Lease, 0, nil
	if c.HasFingerprint && !r.hasFP {
		r.hasFP, r.fp = true, c.Fingerprint
	}
	if c.HasEntity {
		r.hasEntity, r.entity, r.version = true, mdlEntityOf(k), c.Version
	}
	r.hasReq, r.req = c.HasRequestID, c.RequestID
}

func (m *mdl) get(k int, now int64, showToken bool) Result {
	now = max(now, m.now)
	r := m.recs[k]
	if r != nil && r.gone(now) {
		r = nil
	}
	res := m.view(OutcomeOK, r, now)
	if !showToken {
		res.Token = 0 // a reader is not the holder
	}
	return res
}

func (m *mdl) count(s State) int64 {
	n := int64(0)
	for _, r := range m.recs {
		if r.state == s {
			n++
		}
	}
	return n
}

// mdlRun drives a Machine and the model with the same random history and
// checks every result, the tokens, the counts and the machine's bookkeeping.
type mdlRun struct {
	m       *Machine
	model   *mdl
	index   uint64
	granted map[int]uint64 // largest token ever granted per key
	tokens  []uint64       // every token seen in a result
	statsAt Stats          // machine stats when the model's were last zeroed
	seen    map[string]int // coverage of outcomes and transitions
	log     *[]mdlLogged   // if set, entry appends what it applied
	cold    *memCold       // if set, ticks demote to it under random policies
	// layout, if set, is the token layout every entry carries (none: the
	// entries of a binary from before). placements lets settles in such
	// entries name their key under other slot bits (see settleDigest).
	// upgrade, if set, is a layout the run may switch to once, from none.
	layout     *digest.TokenLayout
	placements bool
	upgrade    *digest.TokenLayout
}

// mdlLogged is one applied entry and its results, to replay elsewhere.
type mdlLogged struct {
	index   uint64
	entry   Entry
	results []Result
}

// loggedMdlRun makes a run of 1..200 random steps and returns it with the
// entries it applied, for a twin to replay.
func loggedMdlRun(rt *rapid.T) (*mdlRun, []mdlLogged) {
	run := newMdlRun()
	var log []mdlLogged
	run.log = &log
	for range rapid.IntRange(1, 200).Draw(rt, "steps") {
		run.step(rt)
	}
	return run, log
}

func newMdlRun() *mdlRun {
	return &mdlRun{m: NewMachine(), model: newMdl(), granted: make(map[int]uint64)}
}

// stamp draws the next stamp: small steps, jumps past leases, retentions and
// AbandonAfter, the exact edges of the deadlines held (where <= versus <
// matters), or a step backwards.
func (run *mdlRun) stamp(t *rapid.T, label string) int64 {
	now := run.m.Now()
	switch rapid.IntRange(0, 11).Draw(t, label+"-kind") {
	case 0, 1, 2:
		return now + rapid.Int64Range(0, 300).Draw(t, label+"-small")
	case 3, 4:
		return now + rapid.Int64Range(300, 3000).Draw(t, label+"-lease")
	case 5:
		return now + rapid.Int64Range(3000, 30000).Draw(t, label+"-retention")
	case 6:
		return now + mdlAbandon + rapid.Int64Range(-3000, 3000).Draw(t, label+"-abandon")
	case 7, 8, 9:
		var edges []int64
		for _, r := range run.model.recs {
			edges = append(edges, r.deadline, r.deadline+mdlAbandon)
		}
		if len(edges) > 0 {
			slices.Sort(edges)
			return rapid.SampledFrom(edges).Draw(t, label+"-edge") - rapid.Int64Range(0, 1).Draw(t, label+"-edge-1")
		}
		return now
	default:
		return now - rapid.Int64Range(0, 5000).Draw(t, label+"-back")
	}
}

func (run *mdlRun) token(t *rapid.T, key int) uint64 {
	switch rapid.IntRange(0, 5).Draw(t, "token-kind") {
	case 0, 1, 2:
		if tok, ok := run.granted[key]; ok {
			return tok
		}
	case 3:
		if len(run.tokens) > 0 {
			return rapid.SampledFrom(run.tokens).Draw(t, "token-seen")
		}
	case 4:
		return rapid.Uint64Range(0, run.model.tokens.token(run.index, 3)).Draw(t, "token-random")
	}
	return rapid.Uint64Range(1, 1<<20).Draw(t, "token-any")
}

// settleDigest is the digest a settle of key names: its record digest, or,
// when the run allows it, the key under other slot bits (without its
// entity, or with an entity it was never reserved with). The model ignores
// the difference: a settle need not name the key's entity.
func (run *mdlRun) settleDigest(t *rapid.T, key int) digest.Digest {
	if !run.placements || run.layout == nil {
		return mdlDigest(key)
	}
	name := fmt.Appendf(nil, "key-%d", key)
	switch rapid.IntRange(0, 3).Draw(t, "settle-placement") {
	case 0:
		return digest.Record(mdlNamespace, name, nil)
	case 1:
		return digest.Record(mdlNamespace, name, []byte("order-9"))
	}
	return mdlDigest(key)
}

func (run *mdlRun) command(t *rapid.T) (Command, int) {
	key := rapid.IntRange(0, mdlKeys-1).Draw(t, "key")
	c := Command{Digest: mdlDigest(key)}
	switch rapid.IntRange(0, 20).Draw(t, "op") {
	case 0, 1, 2, 3, 4, 5, 6:
		c.Op = OpReserve
		c.Lease = rapid.Int64Range(100, 2000).Draw(t, "lease")
		c.MaxAttempts = uint8(rapid.IntRange(1, 4).Draw(t, "max"))
		c.Retention = rapid.Int64Range(500, 20000).Draw(t, "retention")
		if fp := rapid.IntRange(0, 2).Draw(t, "fp"); fp > 0 {
			c.HasFingerprint, c.Fingerprint = true, uint64(fp)
		}
		if e := mdlEntityOf(key); e >= 0 {
			c.HasEntity = true
			c.Entity = digest.Entity(mdlNamespace, mdlEntityName(e))
			c.Version = rapid.Uint64Range(0, 4).Draw(t, "version")
		}
		if id := rapid.IntRange(0, 2).Draw(t, "request-id"); id > 0 {
			c.HasRequestID, c.RequestID = true, RequestIDHash(fmt.Appendf(nil, "req-%d", id))
		}
	case 7, 8, 9, 10:
		c.Op = OpComplete
		c.Token = run.token(t, key)
		c.Retention = rapid.Int64Range(500, 20000).Draw(t, "retention")
		if r := rapid.IntRange(0, 2).Draw(t, "result"); r > 0 {
			c.Result = fmt.Appendf(nil, "r%d", r)
		}
	case 11, 12, 13:
		c.Op = OpFail
		c.Token = run.token(t, key)
		c.Retention = rapid.Int64Range(500, 20000).Draw(t, "retention")
		if rapid.Bool().Draw(t, "has-retry-after") {
			c.HasRetryAfter, c.RetryAfter = true, rapid.Int64Range(0, 3000).Draw(t, "retry-after")
		}
		c.Poison = rapid.IntRange(0, 5).Draw(t, "poison") == 0
	case 14, 15:
		c.Op = OpRelease
		c.Token = run.token(t, key)
	case 16, 17:
		c.Op = OpExtend
		c.Token = run.token(t, key)
		c.Lease = rapid.Int64Range(100, 2000).Draw(t, "lease")
	case 18:
		c.Op = OpForget
	case 19:
		c.Op = OpGet
		c.ShowToken = rapid.Bool().Draw(t, "show-token")
	default:
		c.Op = opIgnorable + Op(rapid.IntRange(0, 3).Draw(t, "ignorable"))
	}
	switch c.Op {
	case OpComplete, OpFail, OpRelease, OpExtend:
		c.Digest = run.settleDigest(t, key)
	}
	return c, key
}

// useTokens makes the run's entries carry layout l, and the model grant its
// tokens.
func (run *mdlRun) useTokens(l digest.TokenLayout) {
	run.layout = &l
	run.model.tokens = mdlTokens{shard: uint64(l.Shard), bits: l.Bits}
}

func (run *mdlRun) step(t *rapid.T) {
	if run.upgrade != nil && rapid.IntRange(0, 49).Draw(t, "upgrade") == 0 {
		run.useTokens(*run.upgrade)
		run.upgrade = nil
		if run.seen != nil {
			run.seen["token-layout-upgraded"]++
		}
	}
	switch rapid.IntRange(0, 9).Draw(t, "step") {
	case 0, 1:
		key := rapid.IntRange(0, mdlKeys-1).Draw(t, "get-key")
		now := run.stamp(t, "get")
		show := rapid.Bool().Draw(t, "get-show-token")
		got, want := run.m.Get(mdlDigest(key), now, show), run.model.get(key, now, show)
		got.Cold = false
		mdlCompare(t, fmt.Sprintf("Get(key %d, %d)", key, now), got, want)
	default:
		run.entry(t)
	}
	run.check(t)
}

func (run *mdlRun) entry(t *rapid.T) {
	e := Entry{
		Now:  run.stamp(t, "now"),
		Tick: rapid.IntRange(0, 4).Draw(t, "tick") == 0,
	}
	if run.cold != nil && e.Tick {
		e.HasPolicy = true
		e.Policy.HotWindow = rapid.Int64Range(0, 3000).Draw(t, "hot-window")
		if rapid.Bool().Draw(t, "budget") {
			e.Policy.HotMaxBytes = rapid.Int64Range(1, 4000).Draw(t, "hot-bytes")
		}
	}
	if run.layout != nil {
		e.HasLayout, e.Layout = true, *run.layout
	}
	n := rapid.IntRange(0, 4).Draw(t, "commands")
	keys := make([]int, n)
	for i := range n {
		var c Command
		c, keys[i] = run.command(t)
		e.Commands = append(e.Commands, c)
	}
	run.index += rapid.Uint64Range(1, 3).Draw(t, "index-step")
	run.model.seen = run.seen
	got := run.m.Apply(run.index, &e, nil)
	want := run.model.apply(&e, run.index, keys)
	if run.log != nil {
		*run.log = append(*run.log, mdlLogged{run.index, e, got})
	}
	if len(got) != len(want) {
		t.Fatalf("Apply returned %d results for %d commands", len(got), len(want))
	}
	for i := range got {
		c := &e.Commands[i]
		what := fmt.Sprintf("index %d: %v key %d token %d (now %d)", run.index, c.Op, keys[i], c.Token, e.Now)
		if got[i].Cold {
			run.cover(Result{Outcome: OutcomeIgnored})
			if run.seen != nil {
				run.seen["cold-"+got[i].Outcome.String()]++
			}
			got[i].Cold = false
		}
		mdlCompare(t, what, got[i], want[i])
		run.cover(got[i])
		if c.Digest != mdlDigest(keys[i]) && got[i].Outcome == OutcomeOK && got[i].State != Absent && run.seen != nil {
			run.seen["settled-under-other-placement"]++
		}
		if got[i].Token != 0 {
			run.tokens = append(run.tokens, got[i].Token)
		}
		if got[i].Replayed {
			if got[i].Token != run.granted[keys[i]] {
				t.Fatalf("%s: replayed token %d is not the key's last grant %d", what, got[i].Token, run.granted[keys[i]])
			}
		} else if got[i].Outcome == OutcomeAcquired {
			l := run.model.tokens
			if got[i].Token&(1<<l.bits-1) != l.shard {
				t.Fatalf("%s: token %d does not name shard %d in its low %d bits", what, got[i].Token, l.shard, l.bits)
			}
			if prev, ok := run.granted[keys[i]]; ok && got[i].Token <= prev {
				t.Fatalf("%s: token %d not above the key's earlier token %d", what, got[i].Token, prev)
			}
			run.granted[keys[i]] = got[i].Token
		}
	}
}

func (run *mdlRun) cover(r Result) {
	if run.seen != nil {
		run.seen[r.Outcome.String()]++
	}
}

func (run *mdlRun) check(t *rapid.T) {
	t.Helper()
	ksCheckMachine(t, run.m)
	if run.m.Now() != run.model.now {
		t.Fatalf("Now = %d, model %d", run.m.Now(), run.model.now)
	}
	if run.cold != nil {
		// Records live in either tier, and the tiers reclaim gone ones on
		// their own schedules: only the results are the model's business.
		for d := range run.cold.recs {
			if _, hot := run.m.table.Get(d); hot {
				t.Fatalf("digest %v held by both tiers", d)
			}
		}
		return
	}
	if run.m.Len() != len(run.model.recs) {
		t.Fatalf("Len = %d, model holds %d", run.m.Len(), len(run.model.recs))
	}
	for _, s := range []State{Absent, Processing, Completed, Failed, Poisoned} {
		if got, want := run.m.Count(s), run.model.count(s); got != want {
			t.Fatalf("Count(%v) = %d, model %d", s, got, want)
		}
	}
	st := run.m.Stats()
	got := mdlStats{st.LeasesExpired - run.statsAt.LeasesExpired, st.Reclaimed - run.statsAt.Reclaimed, st.Forgotten - run.statsAt.Forgotten}
	if got != run.model.stats {
		t.Fatalf("Stats %+v, model %+v", got, run.model.stats)
	}
}

func mdlCompare(t *rapid.T, what string, got, want Result) {
	t.Helper()
	if len(got.Result) == 0 {
		got.Result = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// mdlRounds is how many rapid.Check rounds (of -rapid.checks histories each,
// 100 by default) the property tests run: the histories are cheap, so the
// default run checks 10 times as many as -short does (3 times under -race,
// which makes them ten times slower).
func mdlRounds() int {
	switch {
	case testing.Short():
		return 1
	case ksRace:
		return 3
	}
	return 10
}

func TestMachineModel(t *testing.T) {
	seen := make(map[string]int)
	prop := func(rt *rapid.T) {
		run := newMdlRun()
		run.seen = seen
		steps := rapid.IntRange(1, 300).Draw(rt, "steps")
		for range steps {
			run.step(rt)
		}
	}
	rapid.Check(t, prop)
	for i := 1; i < mdlRounds() && !t.Failed(); i++ {
		t.Run(fmt.Sprintf("round-%d", i), func(t *testing.T) { rapid.Check(t, prop) })
	}
	// The generator must reach every row of the tables, or the check above
	// proves little.
	for _, o := range []Outcome{OutcomeOK, OutcomeAcquired, OutcomeBusy, OutcomeDuplicate, OutcomePoisoned,
		OutcomeStale, OutcomeMismatch, OutcomeLeaseLost, OutcomeIgnored} {
		if seen[o.String()] == 0 {
			t.Errorf("no command answered %v", o)
		}
	}
	for _, k := range []string{"took-over", "lease-expired", "poisoned-on-takeover", "fail->FAILED", "fail->POISONED",
		"complete", "complete-retry", "fail-retry", "release", "extend", "forget-existed", "reclaimed-by-tick", "stale-on-record",
		"replayed", "extend-kept-longer-lease"} {
		if seen[k] == 0 {
			t.Errorf("never saw %s", k)
		}
	}
	t.Logf("coverage: %v", seen)
}

// TestMachineModelTokens: under a random token layout, possibly switched
// once from the zero layout mid-history (an upgrade), with settles that
// name their key without its entity or with another one, the machine
// answers exactly as the reference model: tokens carry the shard in their
// low bits and still increase per key, and a settle finds the record its
// token holds whatever slot bits it names.
func TestMachineModelTokens(t *testing.T) {
	seen := make(map[string]int)
	prop := func(rt *rapid.T) {
		run := newMdlRun()
		run.seen = seen
		run.placements = true
		bits := uint8(rapid.IntRange(0, digest.MaxTokenBits).Draw(rt, "token-bits"))
		l := digest.TokenLayout{Bits: bits, Shard: uint32(rapid.Uint64Range(0, 1<<bits-1).Draw(rt, "token-shard"))}
		if rapid.Bool().Draw(rt, "upgrade-later") {
			run.upgrade = &l
		} else {
			run.useTokens(l)
		}
		steps := rapid.IntRange(1, 300).Draw(rt, "steps")
		for range steps {
			run.step(rt)
		}
	}
	rapid.Check(t, prop)
	for i := 1; i < mdlRounds() && !t.Failed(); i++ {
		t.Run(fmt.Sprintf("round-%d", i), func(t *testing.T) { rapid.Check(t, prop) })
	}
	for _, k := range []string{"complete", "complete-retry", "fail-retry", "release", "extend", "fail->FAILED",
		"settled-under-other-placement", "token-layout-upgraded"} {
		if seen[k] == 0 {
			t.Errorf("never saw %s", k)
		}
	}
	t.Logf("coverage: %v", seen)
}

// TestMachineModelTiered: with a cold tier and ticks carrying random hot
// windows and budgets, the machine answers exactly as the reference model,
// which knows nothing of tiers: demotion is invisible but for Result.Cold.
func TestMachineModelTiered(t *testing.T) {
	seen := make(map[string]int)
	prop := func(rt *rapid.T) {
		run := newMdlRun()
		run.cold = newMemCold()
		run.m.UseCold(run.cold)
		run.seen = seen
		steps := rapid.IntRange(1, 300).Draw(rt, "steps")
		for range steps {
			run.step(rt)
		}
	}
	rapid.Check(t, prop)
	for i := 1; i < mdlRounds() && !t.Failed(); i++ {
		t.Run(fmt.Sprintf("round-%d", i), func(t *testing.T) { rapid.Check(t, prop) })
	}
	for _, k := range []string{"cold-DUPLICATE", "cold-POISONED", "cold-OK", "cold-MISMATCH"} {
		if seen[k] == 0 {
			t.Errorf("no command answered %s from the cold tier", k)
		}
	}
	t.Logf("coverage: %v", seen)
}
