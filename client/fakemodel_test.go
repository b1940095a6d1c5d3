package client

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
)

// fakeModel is the record model behind fakeGrid: the record state machine
// of docs/design.md section 2 as the grid answers it on the wire, kept
// small enough to read at once. It is written after keyspace (the state
// machine) and api (defaults, limits, error codes), which the client must
// not import, and shares with them only package digest: the digests, the
// wire limits and defaults, and the token layout.
//
// Like the grid it keys records by their record digest (namespace, key and
// the entity's slot bits), stamps each entry with max(previous stamp, wall
// clock), and derives a grant's token from the entry's index and the
// command's position (digest.TokenLayout). It leaves out what the client
// tests do not see through this fake: the cold tier, the expiry sweep (a
// record that is gone is dropped when next looked up), result omission in
// large batch answers, the second routing step of a settle, and all of
// Raft. The real server is tested by the integration tests.
//
// A fakeModel is not safe for concurrent use; fakeGrid holds its mutex.
type fakeModel struct {
	now      int64  // the latest stamp applied (Unix ms)
	index    uint64 // of the last entry applied
	records  map[digest.Digest]*fakeRecord
	versions map[digest.Digest]fakeVersion // committed versions, by entity digest
}

// fakeRecord is the state held for one record digest.
type fakeRecord struct {
	state       gridpb.State
	token       uint64
	attempts    uint32
	maxAttempts uint32 // PROCESSING and FAILED
	// deadline (Unix ms) is the lease's end (PROCESSING), the retry's
	// not-before (FAILED) or the retention's end (COMPLETED, POISONED).
	deadline    int64
	completedAt int64   // Unix ms, COMPLETED and POISONED
	fingerprint *uint64 // the first granted Reserve's
	result      []byte  // COMPLETED
	requestID   string  // the granting Reserve's, while PROCESSING; "" for none
	entity      *fakeEntityRef
}

// fakeEntityRef is the entity and version a Reserve named, kept until the
// record is settled: a Complete raises the entity's committed version.
type fakeEntityRef struct {
	entity  digest.Digest
	version uint64
}

// fakeVersion is an entity's committed version, kept until deadline (the
// retention end of the longest-kept record that raised it).
type fakeVersion struct {
	version  uint64
	deadline int64
}

// The state machine's own timing rules (keyspace/limits.go); the wire
// limits and defaults come from package digest.
const (
	fakeBackoffBase  = time.Second
	fakeBackoffMax   = 5 * time.Minute
	fakeAbandonAfter = 7 * 24 * time.Hour
)

func newFakeModel() *fakeModel {
	return &fakeModel{records: map[digest.Digest]*fakeRecord{}, versions: map[digest.Digest]fakeVersion{}}
}

// fakeKind is the kind of a fakeCmd.
type fakeKind uint8

const (
	fakeReserve fakeKind = iota + 1
	fakeComplete
	fakeFail
	fakeRelease
	fakeExtend
	fakeGet
	fakeForget
)

// fakeCmd is one validated operation, defaults filled in.
type fakeCmd struct {
	kind        fakeKind
	d           digest.Digest
	token       uint64
	lease       int64  // ms: Reserve, Extend
	retention   int64  // ms: Complete, Fail, Reserve (for a poisoning)
	retryAfter  *int64 // ms: Fail
	poison      bool
	maxAttempts uint32
	fingerprint *uint64
	entity      *fakeEntityRef
	requestID   string
	result      []byte
	showToken   bool
}

// fakeCommand validates op as the grid's service does (api/convert.go),
// and returns the gRPC status error it refuses an invalid one with.
func fakeCommand(op *gridpb.Op) (fakeCmd, error) {
	c, err := fakeParse(op)
	if err != nil {
		code := codes.InvalidArgument
		if errors.Is(err, digest.ErrResultTooLarge) {
			code = codes.ResourceExhausted
		}
		return fakeCmd{}, status.Error(code, err.Error())
	}
	return c, nil
}

func fakeParse(op *gridpb.Op) (c fakeCmd, err error) {
	req := op.Request()
	if req == nil {
		return c, errors.New("api: batch operation has no request set")
	}
	if g := op.GetGet(); g != nil {
		c.kind, c.showToken = fakeGet, g.GetShowToken()
		if raw := g.GetDigest(); raw != nil {
			d, ok := digest.Decode(raw)
			if !ok || g.GetKey() != nil || g.GetEntity() != nil || len(g.GetNamespace()) != 0 {
				return c, fmt.Errorf("api: invalid digest: want %d bytes and no namespace, key or entity beside it (got %d bytes)", digest.Size, len(raw))
			}
			c.d = d
			return c, nil
		}
	}
	ns := string(req.GetNamespace())
	if err := digest.ValidateNamespace(ns); err != nil {
		return c, err
	}
	if err := digest.ValidateKey(req.GetKey()); err != nil {
		return c, err
	}
	if err := digest.ValidateEntity(req.GetEntity()); err != nil {
		return c, err
	}
	c.d = digest.Record(ns, req.GetKey(), req.GetEntity())
	if settle, ok := req.(interface{ GetToken() uint64 }); ok {
		c.token = settle.GetToken()
		if err := digest.ValidateToken(c.token); err != nil {
			return c, err
		}
	}
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		r := o.Reserve
		c.kind = fakeReserve
		if c.lease, err = fakeDuration(r.GetLeaseMs(), digest.DefaultLease, digest.ValidateLease); err != nil {
			return c, err
		}
		if c.retention, err = fakeDuration(r.GetPoisonRetentionMs(), digest.DefaultPoisonRetention, digest.ValidateRetention); err != nil {
			return c, fmt.Errorf("poison_retention: %w", err)
		}
		if c.maxAttempts = r.GetMaxAttempts(); c.maxAttempts == 0 {
			c.maxAttempts = digest.DefaultMaxAttempts
		}
		if err := digest.ValidateMaxAttempts(int(c.maxAttempts)); err != nil {
			return c, err
		}
		if r.Fingerprint != nil {
			fp := r.GetFingerprint()
			c.fingerprint = &fp
		}
		if e := r.GetEntity(); len(e) > 0 {
			c.entity = &fakeEntityRef{entity: digest.Entity(ns, e), version: r.GetVersion()}
		}
		if err := digest.ValidateRequestID(r.GetRequestId()); err != nil {
			return c, err
		}
		c.requestID = string(r.GetRequestId())
	case *gridpb.Op_Complete:
		c.kind = fakeComplete
		if c.retention, err = fakeDuration(o.Complete.GetRetentionMs(), digest.DefaultRetention, digest.ValidateRetention); err != nil {
			return c, err
		}
		if err := digest.ValidateResult(o.Complete.GetResult()); err != nil {
			return c, err
		}
		c.result = bytes.Clone(o.Complete.GetResult())
	case *gridpb.Op_Fail:
		f := o.Fail
		c.kind, c.poison = fakeFail, f.GetPoison()
		if c.retention, err = fakeDuration(f.GetRetentionMs(), digest.DefaultPoisonRetention, digest.ValidateRetention); err != nil {
			return c, err
		}
		if f.RetryAfterMs != nil {
			ms, err := fakeDuration(f.GetRetryAfterMs(), 0, digest.ValidateRetryAfter)
			if err != nil {
				return c, err
			}
			c.retryAfter = &ms
		}
	case *gridpb.Op_Release:
		c.kind = fakeRelease
	case *gridpb.Op_Extend:
		c.kind = fakeExtend
		if c.lease, err = fakeDuration(o.Extend.GetLeaseMs(), digest.DefaultLease, digest.ValidateLease); err != nil {
			return c, err
		}
	case *gridpb.Op_Forget:
		c.kind = fakeForget
	}
	return c, nil
}

// fakeDuration converts milliseconds from the wire, 0 meaning def, and
// checks them: a value too large for a time.Duration is refused, not
// wrapped into a valid-looking one.
func fakeDuration(ms int64, def time.Duration, validate func(time.Duration) error) (int64, error) {
	d := def
	switch {
	case ms > math.MaxInt64/int64(time.Millisecond) || ms < math.MinInt64/int64(time.Millisecond):
		d = math.MaxInt64
	case ms != 0:
		d = time.Duration(ms) * time.Millisecond
	}
	return d.Milliseconds(), validate(d)
}

// stamp is the time an entry or a read is evaluated at: t, but never
// before an entry already applied.
func (m *fakeModel) stamp(t time.Time) int64 { return max(m.now, t.UnixMilli()) }

// apply applies cmds (none of them a Get) as one entry of the log stamped
// t: the command at position i is granted layout.Token(index, i).
func (m *fakeModel) apply(t time.Time, layout digest.TokenLayout, cmds ...fakeCmd) []*gridpb.OpResult {
	m.now = m.stamp(t)
	m.index++
	out := make([]*gridpb.OpResult, 0, len(cmds))
	for i := range cmds {
		c := &cmds[i]
		var res *gridpb.OpResult
		switch c.kind {
		case fakeReserve:
			res = m.reserve(c, layout.Token(m.index, i))
		case fakeComplete:
			res = m.complete(c)
		case fakeFail:
			res = m.fail(c)
		case fakeRelease:
			res = m.release(c)
		case fakeExtend:
			res = m.extend(c)
		case fakeForget:
			res = m.forget(c)
		default:
			panic(fmt.Sprintf("fake: command kind %d in an entry", c.kind))
		}
		out = append(out, res)
	}
	return out
}

// read answers a Get at t and changes nothing. Without showToken it
// answers no token: a reader is not the holder.
func (m *fakeModel) read(c *fakeCmd, t time.Time) *gridpb.OpResult {
	now := m.stamp(t)
	rec := m.records[c.d]
	if rec != nil && rec.gone(now) {
		rec = nil
	}
	res := view(gridpb.Outcome_OK, rec, now)
	if !c.showToken {
		res.Token = 0
	}
	return res
}

// gone reports whether the record no longer exists at now: a settled one
// past its retention, or one nobody came back for long after its deadline.
func (r *fakeRecord) gone(now int64) bool {
	if r.settled() {
		return r.deadline <= now
	}
	return r.deadline+fakeAbandonAfter.Milliseconds() <= now
}

func (r *fakeRecord) settled() bool {
	return r.state == gridpb.State_COMPLETED || r.state == gridpb.State_STATE_POISONED
}

// settle makes r COMPLETED or POISONED at now, kept for retention, and
// returns the entity its Reserve named.
func (r *fakeRecord) settle(s gridpb.State, now, retention int64) *fakeEntityRef {
	ref := r.entity
	r.state, r.deadline, r.completedAt = s, now+retention, now
	r.maxAttempts, r.requestID, r.entity = 0, "", nil
	return ref
}

// lookup returns d's record at m.now, nil when it has none; a record that
// is gone is dropped.
func (m *fakeModel) lookup(d digest.Digest) *fakeRecord {
	rec := m.records[d]
	if rec != nil && rec.gone(m.now) {
		delete(m.records, d)
		return nil
	}
	return rec
}

// view renders an outcome and the record as it now stands. The holder's
// token goes only to answers that grant or settle with it.
func view(o gridpb.Outcome, r *fakeRecord, now int64) *gridpb.OpResult {
	res := &gridpb.OpResult{Outcome: o, State: gridpb.State_ABSENT, NowUnixMs: now}
	if r == nil {
		return res
	}
	res.State, res.Token, res.Attempt, res.Tier = r.state, r.token, r.attempts, gridpb.Tier_HOT
	res.DeadlineUnixMs, res.CompletedAtUnixMs = r.deadline, r.completedAt
	res.Result = bytes.Clone(r.result)
	if r.fingerprint != nil {
		fp := *r.fingerprint
		res.Fingerprint = &fp
	}
	switch o {
	case gridpb.Outcome_BUSY, gridpb.Outcome_LEASE_LOST, gridpb.Outcome_MISMATCH, gridpb.Outcome_STALE:
		res.Token = 0
	}
	return res
}

// reserve is the Reserve table of docs/design.md section 2, after the
// replay of section 3: the resend of the Reserve that holds the lease gets
// that grant again.
func (m *fakeModel) reserve(c *fakeCmd, token uint64) *gridpb.OpResult {
	now := m.now
	rec := m.lookup(c.d)
	if rec != nil && rec.replays(c, now) {
		res := view(gridpb.Outcome_ACQUIRED, rec, now)
		res.Replayed = true
		return res
	}
	if c.entity != nil {
		if v, ok := m.versions[c.entity.entity]; ok && v.deadline > now && c.entity.version <= v.version {
			return view(gridpb.Outcome_STALE, rec, now)
		}
	}
	if rec != nil && c.fingerprint != nil && rec.fingerprint != nil && *rec.fingerprint != *c.fingerprint {
		return view(gridpb.Outcome_MISMATCH, rec, now)
	}
	if rec == nil {
		rec = &fakeRecord{}
		m.records[c.d] = rec
		return m.grant(c, rec, token)
	}
	switch rec.state {
	case gridpb.State_COMPLETED:
		return view(gridpb.Outcome_DUPLICATE, rec, now)
	case gridpb.State_STATE_POISONED:
		return view(gridpb.Outcome_POISONED, rec, now)
	}
	if rec.deadline > now { // PROCESSING or FAILED
		res := view(gridpb.Outcome_BUSY, rec, now)
		res.RetryAfterMs = rec.deadline - now
		return res
	}
	// A zombie lease or an elapsed retry delay: the previous attempt
	// counts. A poisoning is this command's doing and takes its token, so
	// the crashed holder's late settles answer LEASE_LOST.
	expired := rec.state == gridpb.State_PROCESSING
	var res *gridpb.OpResult
	if rec.attempts >= c.maxAttempts {
		rec.settle(gridpb.State_STATE_POISONED, now, c.retention)
		rec.token = token
		res = view(gridpb.Outcome_POISONED, rec, now)
	} else {
		res = m.grant(c, rec, token)
	}
	res.LeaseExpired = expired
	return res
}

// replays reports whether c is a resend of the Reserve holding rec's
// lease: same request id, lease in force, and not another payload.
func (r *fakeRecord) replays(c *fakeCmd, now int64) bool {
	if c.requestID == "" || r.requestID != c.requestID || r.state != gridpb.State_PROCESSING || r.deadline <= now {
		return false
	}
	return c.fingerprint == nil || r.fingerprint == nil || *r.fingerprint == *c.fingerprint
}

// grant makes rec PROCESSING under token, for the next attempt. The first
// fingerprint stays; the entity is c's, else the previous Reserve's.
func (m *fakeModel) grant(c *fakeCmd, rec *fakeRecord, token uint64) *gridpb.OpResult {
	rec.state, rec.token, rec.attempts, rec.maxAttempts = gridpb.State_PROCESSING, token, rec.attempts+1, c.maxAttempts
	rec.deadline, rec.completedAt, rec.result, rec.requestID = m.now+c.lease, 0, nil, c.requestID
	if rec.fingerprint == nil {
		rec.fingerprint = c.fingerprint
	}
	if c.entity != nil {
		rec.entity = c.entity
	}
	return view(gridpb.Outcome_ACQUIRED, rec, m.now)
}

// held finds the record a settle acts on, as keyspace/held.go does: the
// record of c.d when it holds c.token, else the same key's record under
// other slot bits (placed by an entity the settle does not name) that
// holds it, else c.d's record, else, when c.d has none, the same key's
// record with the lowest digest, so that a lost token answers LEASE_LOST
// rather than a Release's OK. Like the grid's, the search sees records
// that are gone but not yet dropped, and then finds nothing.
func (m *fakeModel) held(c *fakeCmd) (digest.Digest, *fakeRecord) {
	rec := m.lookup(c.d)
	if rec != nil && rec.token == c.token {
		return c.d, rec
	}
	var holder, first *digest.Digest
	for d, r := range m.records {
		if d == c.d || d.Lo != c.d.Lo || d.Hi>>32 != c.d.Hi>>32 {
			continue
		}
		if r.token == c.token {
			holder = &d
		}
		if first == nil || d.Hi < first.Hi {
			first = &d
		}
	}
	if holder != nil {
		if r := m.lookup(*holder); r != nil {
			return *holder, r
		}
	}
	if rec == nil && first != nil {
		if r := m.lookup(*first); r != nil {
			return *first, r
		}
	}
	return c.d, rec
}

// complete settles a held lease as COMPLETED; repeated with the same
// token after success it answers OK again.
func (m *fakeModel) complete(c *fakeCmd) *gridpb.OpResult {
	_, rec := m.held(c)
	switch {
	case rec != nil && rec.token == c.token && rec.state == gridpb.State_PROCESSING:
		ref := rec.settle(gridpb.State_COMPLETED, m.now, c.retention)
		if len(c.result) > 0 {
			rec.result = c.result
		}
		if ref != nil {
			m.raise(*ref, rec.deadline)
		}
		return view(gridpb.Outcome_OK, rec, m.now)
	case rec != nil && rec.token == c.token && rec.state == gridpb.State_COMPLETED:
		return view(gridpb.Outcome_OK, rec, m.now)
	}
	return view(gridpb.Outcome_LEASE_LOST, rec, m.now)
}

// raise lifts an entity's committed version to at least ref.version, kept
// as long as the longest-kept record that raised it.
func (m *fakeModel) raise(ref fakeEntityRef, deadline int64) {
	v := fakeVersion{version: ref.version, deadline: deadline}
	if old, ok := m.versions[ref.entity]; ok && old.deadline > m.now {
		v.version, v.deadline = max(old.version, v.version), max(old.deadline, v.deadline)
	}
	m.versions[ref.entity] = v
}

// fail settles a held lease as FAILED, retryable after a backoff, or as
// POISONED when asked or when the attempts are used up. Idempotent for
// the same token.
func (m *fakeModel) fail(c *fakeCmd) *gridpb.OpResult {
	_, rec := m.held(c)
	if rec == nil || rec.token != c.token {
		return view(gridpb.Outcome_LEASE_LOST, rec, m.now)
	}
	switch rec.state {
	case gridpb.State_FAILED, gridpb.State_STATE_POISONED:
		return view(gridpb.Outcome_OK, rec, m.now)
	case gridpb.State_PROCESSING:
	default:
		return view(gridpb.Outcome_LEASE_LOST, rec, m.now)
	}
	if c.poison || rec.attempts >= rec.maxAttempts {
		rec.settle(gridpb.State_STATE_POISONED, m.now, c.retention)
		return view(gridpb.Outcome_OK, rec, m.now)
	}
	delay := fakeBackoff(rec.attempts)
	if c.retryAfter != nil {
		delay = *c.retryAfter
	}
	rec.state, rec.deadline, rec.requestID = gridpb.State_FAILED, m.now+delay, ""
	return view(gridpb.Outcome_OK, rec, m.now)
}

// fakeBackoff is the retry delay (ms) after a failed attempt: the base
// doubled per attempt, at most the maximum.
func fakeBackoff(attempt uint32) int64 {
	delay := fakeBackoffBase.Milliseconds()
	for i := uint32(1); i < attempt && delay < fakeBackoffMax.Milliseconds(); i++ {
		delay *= 2
	}
	return min(delay, fakeBackoffMax.Milliseconds())
}

// release gives a held lease back without counting an attempt. A key
// nobody holds answers OK, so a retried Release succeeds.
func (m *fakeModel) release(c *fakeCmd) *gridpb.OpResult {
	d, rec := m.held(c)
	switch {
	case rec == nil:
		return view(gridpb.Outcome_OK, nil, m.now)
	case rec.token == c.token && rec.state == gridpb.State_PROCESSING:
		delete(m.records, d)
		return view(gridpb.Outcome_OK, nil, m.now)
	}
	return view(gridpb.Outcome_LEASE_LOST, rec, m.now)
}

// extend renews a held lease to max(its deadline, now + lease), also past
// its deadline as long as nobody took it over.
func (m *fakeModel) extend(c *fakeCmd) *gridpb.OpResult {
	_, rec := m.held(c)
	if rec == nil || rec.token != c.token || rec.state != gridpb.State_PROCESSING {
		return view(gridpb.Outcome_LEASE_LOST, rec, m.now)
	}
	rec.deadline = max(rec.deadline, m.now+c.lease)
	return view(gridpb.Outcome_OK, rec, m.now)
}

// forget removes a record whatever its state; Existed tells whether there
// was one. An entity's committed version stays.
func (m *fakeModel) forget(c *fakeCmd) *gridpb.OpResult {
	rec := m.lookup(c.d)
	if rec != nil {
		delete(m.records, c.d)
	}
	res := view(gridpb.Outcome_OK, nil, m.now)
	res.Existed = rec != nil
	return res
}
