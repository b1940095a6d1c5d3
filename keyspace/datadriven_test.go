package keyspace

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/l4xg/grid/digest"
)

// TestMachineDataDriven runs the scripts under testdata/machine: the record
// state machine of docs/design.md section 2 stated as data. Regenerate the
// expected output with
//
//	go test ./keyspace/ -run TestMachineDataDriven -rewrite
//
// and then read every changed line against docs/design.md: the scripts are the
// contract, not a recording of what the code happens to print.
//
// # The command language
//
// Every command that changes state is applied as one Raft entry through
// Machine.Apply with an explicit stamp now=, at the next Raft index (1, 2, ...)
// unless index= names one (indexes must increase).
//
//	reserve key=a [lease=1000] [max=3] [retention=10000] [fp=7] [entity=o1 version=3] [id=r1] now=100 [index=N]
//	complete key=a [token=T] [retention=5000] [result=x] now=...
//	fail key=a [token=T] [retry-after=500] [poison] [retention=10000] now=...
//	release key=a [token=T] now=...
//	extend key=a [token=T] [lease=1000] now=...
//	forget key=a now=...
//	get key=a [show-token] now=...  Machine.Get, not applied; checks that it changes nothing
//	tick now=... [index=N]     a Tick entry with no commands: prints the records held before and after
//	batch now=... [index=N] [tick]
//	<one command per line, without now= and index=; "get" is an OpGet in the entry>
//	dump                       every record held (expired ones too, marked "gone"), counts, entities
//	stats                      Machine.Stats
//	tokens                     the raw value of every token named so far
//	reset                      a fresh Machine, names forgotten
//
// The retention of reserve and fail is the retention of the record if the
// call poisons it. Durations and stamps are milliseconds.
//
// A token T is "tN" (the N-th distinct token the script has seen, in order of
// appearance), "last" or absent (the token of the key's last ACQUIRED), or a
// number. Keys are record digests in namespace "t"; a key first reserved with
// an entity keeps that entity (digest.Record) for every later command, as the
// API requires.
//
// BUSY, LEASE_LOST, MISMATCH and STALE never show a token: the holder's
// token is not handed to a caller that does not hold the lease. Neither does
// a get, unless it asks for the operator view with show-token.
//
// id= is the reserve's request id (its RequestIDHash goes into the command);
// dump shows the id a PROCESSING record keeps.
//
// A result prints as
//
//	OUTCOME state=S [token=tN] [attempt=N deadline=N] [retry-after=N] [completed-at=N] [result=x] [fp=N] [existed=B] [took-over] [lease-expired] [replayed] [at=N]
//
// where at= appears only when the command was evaluated at a stamp other than
// the now= it was given (stamps never move backwards).
//
// Besides the output, the harness checks after every command that the counts
// and side maps agree with the table, that every ACQUIRED token is
// index<<16|position and larger than every token granted before for that key
// (a replayed one is the key's last grant), and that no BUSY, LEASE_LOST,
// MISMATCH or STALE carries a token.
func TestMachineDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		h := newDDHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out := h.run(t, d)
			ksCheckMachine(t, h.m)
			return out
		})
	})
}

const ddNamespace = "t"

type ddHarness struct {
	m         *Machine
	index     uint64                   // last Raft index applied
	keys      map[string]digest.Digest // key name -> record digest
	keyEntity map[string]string        // key name -> entity named at its first reserve
	entities  map[string]digest.Digest
	names     map[uint64]string        // token -> tN
	tokens    []uint64                 // tN -> token, by N-1
	last      map[string]uint64        // key -> token of its last ACQUIRED
	granted   map[digest.Digest]uint64 // largest token granted per record digest
	ids       map[uint64]string        // RequestIDHash -> request id named by a reserve
}

func newDDHarness() *ddHarness {
	return &ddHarness{
		m:         NewMachine(),
		keys:      make(map[string]digest.Digest),
		keyEntity: make(map[string]string),
		entities:  make(map[string]digest.Digest),
		names:     make(map[uint64]string),
		last:      make(map[string]uint64),
		granted:   make(map[digest.Digest]uint64),
		ids:       make(map[uint64]string),
	}
}

// ddArgs is the argument list of one command line, with a check that every
// argument was used (so a typo in a script fails instead of being ignored).
type ddArgs struct {
	pos  string
	cmd  string
	args []datadriven.CmdArg
	used map[string]bool
}

func newDDArgs(pos, cmd string, args []datadriven.CmdArg) *ddArgs {
	return &ddArgs{pos: pos, cmd: cmd, args: args, used: make(map[string]bool)}
}

func (a *ddArgs) lookup(key string) (string, bool) {
	for _, arg := range a.args {
		if arg.Key == key {
			a.used[key] = true
			if len(arg.Vals) == 0 {
				return "", true
			}
			return arg.Vals[0], true
		}
	}
	return "", false
}

func (a *ddArgs) has(key string) bool {
	_, ok := a.lookup(key)
	return ok
}

func (a *ddArgs) str(t *testing.T, key string) string {
	t.Helper()
	v, ok := a.lookup(key)
	if !ok || v == "" {
		t.Fatalf("%s: %s needs %s=", a.pos, a.cmd, key)
	}
	return v
}

func (a *ddArgs) int(t *testing.T, key string, def int64) int64 {
	t.Helper()
	v, ok := a.lookup(key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", a.pos, key, v, err)
	}
	return n
}

func (a *ddArgs) uint(t *testing.T, key string) uint64 {
	t.Helper()
	v := a.str(t, key)
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %s=%q: %v", a.pos, key, v, err)
	}
	return n
}

func (a *ddArgs) done(t *testing.T) {
	t.Helper()
	for _, arg := range a.args {
		if !a.used[arg.Key] {
			t.Fatalf("%s: %s does not take %s", a.pos, a.cmd, arg.Key)
		}
	}
}

func (h *ddHarness) run(t *testing.T, d *datadriven.TestData) string {
	a := newDDArgs(d.Pos, d.Cmd, d.CmdArgs)
	switch d.Cmd {
	case "reserve", "complete", "fail", "release", "extend", "forget":
		now := a.int(t, "now", -1)
		if now < 0 {
			t.Fatalf("%s: %s needs now=", d.Pos, d.Cmd)
		}
		index := h.nextIndex(t, a)
		c, _ := h.command(t, a)
		a.done(t)
		res := h.apply(t, index, &Entry{Now: now, Commands: []Command{c}})
		return h.format(res[0], c.Op, now)
	case "batch":
		now := a.int(t, "now", -1)
		if now < 0 {
			t.Fatalf("%s: batch needs now=", d.Pos)
		}
		tick := a.has("tick")
		index := h.nextIndex(t, a)
		a.done(t)
		var cmds []Command
		var keys []string
		for line := range strings.SplitSeq(strings.TrimSpace(d.Input), "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			cmd, args, err := datadriven.ParseLine(line)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			la := newDDArgs(d.Pos, cmd, args)
			c, key := h.command(t, la)
			la.done(t)
			cmds = append(cmds, c)
			keys = append(keys, key)
		}
		res := h.apply(t, index, &Entry{Now: now, Tick: tick, Commands: cmds})
		var b strings.Builder
		for i, r := range res {
			fmt.Fprintf(&b, "%s %s: %s\n", cmds[i].Op, keys[i], h.format(r, cmds[i].Op, now))
		}
		return b.String()
	case "get":
		key := a.str(t, "key")
		now := a.int(t, "now", 0)
		show := a.has("show-token")
		a.done(t)
		d := h.digest(t, key, "")
		before, beforeOK := h.m.table.Get(d)
		n, counts := h.m.Len(), h.m.counts
		res := h.m.Get(d, now, show)
		after, afterOK := h.m.table.Get(d)
		if before != after || beforeOK != afterOK || n != h.m.Len() || counts != h.m.counts {
			t.Errorf("%s: Get changed the machine", a.pos)
		}
		return h.format(res, 0, now)
	case "tick":
		now := a.int(t, "now", -1)
		if now < 0 {
			t.Fatalf("%s: tick needs now=", d.Pos)
		}
		index := h.nextIndex(t, a)
		a.done(t)
		before, reclaimed := h.m.Len(), h.m.Stats().Reclaimed
		h.apply(t, index, &Entry{Now: now, Tick: true})
		return fmt.Sprintf("held %d -> %d, reclaimed %d\n", before, h.m.Len(), h.m.Stats().Reclaimed-reclaimed)
	case "dump":
		a.done(t)
		return h.dump()
	case "stats":
		a.done(t)
		st := h.m.Stats()
		return fmt.Sprintf("leases-expired=%d reclaimed=%d forgotten=%d\n", st.LeasesExpired, st.Reclaimed, st.Forgotten)
	case "tokens":
		a.done(t)
		var b strings.Builder
		for i, tok := range h.tokens {
			fmt.Fprintf(&b, "t%d = %d<<16 | %d\n", i+1, tok>>16, tok&0xffff)
		}
		return b.String()
	case "reset":
		a.done(t)
		*h = *newDDHarness()
		return ""
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		return ""
	}
}

func (h *ddHarness) nextIndex(t *testing.T, a *ddArgs) uint64 {
	t.Helper()
	index := uint64(a.int(t, "index", int64(h.index+1)))
	if index <= h.index {
		t.Fatalf("%s: index %d does not follow %d", a.pos, index, h.index)
	}
	return index
}

// digest returns the record digest of key. entity is the entity named by the
// command (reserve only); other commands use the key's entity.
func (h *ddHarness) digest(t *testing.T, key, entity string) digest.Digest {
	t.Helper()
	if known, ok := h.keyEntity[key]; ok && entity != "" && entity != known {
		t.Fatalf("key %s was reserved with entity %s, not %s", key, known, entity)
	}
	if entity == "" {
		entity = h.keyEntity[key]
	} else {
		h.keyEntity[key] = entity
	}
	d := digest.Record(ddNamespace, []byte(key), []byte(entity))
	if old, ok := h.keys[key]; ok && old != d {
		t.Fatalf("key %s first used without entity, now with %s", key, entity)
	}
	h.keys[key] = d
	return d
}

func (h *ddHarness) token(t *testing.T, a *ddArgs, key string) uint64 {
	t.Helper()
	v, ok := a.lookup("token")
	if !ok || v == "last" {
		tok, ok := h.last[key]
		if !ok {
			t.Fatalf("%s: no ACQUIRED for %s yet, name a token", a.pos, key)
		}
		return tok
	}
	if n, ok := strings.CutPrefix(v, "t"); ok {
		i, err := strconv.Atoi(n)
		if err != nil || i < 1 || i > len(h.tokens) {
			t.Fatalf("%s: unknown token %s", a.pos, v)
		}
		return h.tokens[i-1]
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: token=%q: %v", a.pos, v, err)
	}
	return n
}

// command builds the Command of one command line (now= and index= excluded).
func (h *ddHarness) command(t *testing.T, a *ddArgs) (Command, string) {
	t.Helper()
	key := a.str(t, "key")
	var c Command
	switch a.cmd {
	case "reserve":
		c.Op = OpReserve
		c.Lease = a.int(t, "lease", 1000)
		c.MaxAttempts = uint8(a.int(t, "max", 3))
		c.Retention = a.int(t, "retention", 10000)
		if a.has("fp") {
			c.HasFingerprint, c.Fingerprint = true, uint64(a.int(t, "fp", 0))
		}
		entity, _ := a.lookup("entity")
		if h.keyEntity[key] != "" && entity == "" {
			t.Fatalf("%s: key %s was reserved with entity %s: name it", a.pos, key, h.keyEntity[key])
		}
		if entity != "" {
			c.HasEntity, c.Entity, c.Version = true, digest.Entity(ddNamespace, []byte(entity)), a.uint(t, "version")
			h.entities[entity] = c.Entity
		}
		if id, ok := a.lookup("id"); ok {
			c.HasRequestID, c.RequestID = true, RequestIDHash([]byte(id))
			h.ids[c.RequestID] = id
		}
		c.Digest = h.digest(t, key, entity)
		return c, key
	case "complete":
		c.Op = OpComplete
		c.Retention = a.int(t, "retention", 5000)
		if v, ok := a.lookup("result"); ok {
			c.Result = []byte(v)
		}
	case "fail":
		c.Op = OpFail
		c.Retention = a.int(t, "retention", 10000)
		if a.has("retry-after") {
			c.HasRetryAfter, c.RetryAfter = true, a.int(t, "retry-after", 0)
		}
		c.Poison = a.has("poison")
	case "release":
		c.Op = OpRelease
	case "extend":
		c.Op = OpExtend
		c.Lease = a.int(t, "lease", 1000)
	case "forget":
		c.Op = OpForget
	case "get":
		c.Op = OpGet
		c.ShowToken = a.has("show-token")
	default:
		t.Fatalf("%s: unknown command %q", a.pos, a.cmd)
	}
	c.Digest = h.digest(t, key, "")
	if c.Op != OpForget && c.Op != OpGet {
		c.Token = h.token(t, a, key)
	}
	return c, key
}

// apply applies e at index and checks the tokens of its grants.
func (h *ddHarness) apply(t *testing.T, index uint64, e *Entry) []Result {
	t.Helper()
	h.index = index
	res := h.m.Apply(index, e, nil)
	if len(res) != len(e.Commands) {
		t.Fatalf("Apply returned %d results for %d commands", len(res), len(e.Commands))
	}
	for i, r := range res {
		c := &e.Commands[i]
		switch r.Outcome {
		case OutcomeBusy, OutcomeLeaseLost, OutcomeMismatch, OutcomeStale:
			if r.Token != 0 {
				t.Errorf("%v hands out the record's token %d", r.Outcome, r.Token)
			}
		}
		if r.Outcome != OutcomeAcquired {
			continue
		}
		if r.Replayed {
			if r.Token != h.granted[c.Digest] {
				t.Errorf("replayed ACQUIRED has token %d, the key's last grant %d", r.Token, h.granted[c.Digest])
			}
			continue
		}
		if want := index<<16 | uint64(i); r.Token != want {
			t.Errorf("ACQUIRED at index %d position %d has token %d, want %d", index, i, r.Token, want)
		}
		if prev, ok := h.granted[c.Digest]; ok && r.Token <= prev {
			t.Errorf("ACQUIRED token %d does not exceed the key's earlier token %d", r.Token, prev)
		}
		h.granted[c.Digest] = r.Token
		for key, d := range h.keys {
			if d == c.Digest {
				h.last[key] = r.Token
			}
		}
	}
	return res
}

func (h *ddHarness) tokenName(tok uint64) string {
	if name, ok := h.names[tok]; ok {
		return name
	}
	h.tokens = append(h.tokens, tok)
	name := fmt.Sprintf("t%d", len(h.tokens))
	h.names[tok] = name
	return name
}

func (h *ddHarness) format(r Result, op Op, now int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s state=%s", r.Outcome, r.State)
	if r.Token != 0 {
		fmt.Fprintf(&b, " token=%s", h.tokenName(r.Token))
	}
	if r.State != Absent {
		fmt.Fprintf(&b, " attempt=%d deadline=%d", r.Attempt, r.Deadline)
	}
	if r.RetryAfter != 0 {
		fmt.Fprintf(&b, " retry-after=%d", r.RetryAfter)
	}
	if r.CompletedAt != 0 {
		fmt.Fprintf(&b, " completed-at=%d", r.CompletedAt)
	}
	if r.Result != nil {
		fmt.Fprintf(&b, " result=%s", r.Result)
	}
	if r.HasFingerprint {
		fmt.Fprintf(&b, " fp=%d", r.Fingerprint)
	}
	if op == OpForget {
		fmt.Fprintf(&b, " existed=%t", r.Existed)
	}
	if r.TookOver {
		b.WriteString(" took-over")
	}
	if r.LeaseExpired {
		b.WriteString(" lease-expired")
	}
	if r.Replayed {
		b.WriteString(" replayed")
	}
	if r.Now != now {
		fmt.Fprintf(&b, " at=%d", r.Now)
	}
	return b.String()
}

func (h *ddHarness) dump() string {
	var b strings.Builder
	m := h.m
	fmt.Fprintf(&b, "now=%d held=%d processing=%d completed=%d failed=%d poisoned=%d\n", m.Now(), m.Len(),
		m.Count(Processing), m.Count(Completed), m.Count(Failed), m.Count(Poisoned))
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range h.keys {
			if !yield(k) {
				return
			}
		}
	})
	known := 0
	for _, k := range keys {
		d := h.keys[k]
		r, ok := m.table.Get(d)
		if !ok {
			continue
		}
		known++
		fmt.Fprintf(&b, "%s: %s token=%s attempt=%d", k, r.State(), h.tokenName(r.Token), r.Attempts())
		if mx := r.MaxAttempts(); mx != 0 {
			fmt.Fprintf(&b, " max=%d", mx)
		}
		fmt.Fprintf(&b, " deadline=%d", r.Deadline)
		if at := r.CompletedAt(); at != 0 {
			fmt.Fprintf(&b, " completed-at=%d", at)
		}
		if r.has(flagResult) {
			fmt.Fprintf(&b, " result=%s", m.result(d))
		}
		if r.has(flagFingerprint) {
			fmt.Fprintf(&b, " fp=%d", m.fingerprint(d))
		}
		if r.has(flagEntity) {
			ref, _ := m.pending.get(d)
			fmt.Fprintf(&b, " entity=%s@%d", h.entityName(ref.entity), ref.version)
		}
		if r.has(flagRequestID) {
			id, _ := m.requestIDs.get(d)
			fmt.Fprintf(&b, " id=%s", h.ids[id])
		}
		if r.gone(m.Now()) {
			b.WriteString(" gone")
		}
		b.WriteString("\n")
	}
	if known != m.Len() {
		fmt.Fprintf(&b, "%d records of unknown keys\n", m.Len()-known)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range h.entities {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		if ev, ok := m.entities.get(h.entities[name]); ok {
			fmt.Fprintf(&b, "entity %s: version=%d until=%d\n", name, ev.version, ev.deadline)
		}
	}
	return b.String()
}

func (h *ddHarness) entityName(d digest.Digest) string {
	for name, e := range h.entities {
		if e == d {
			return name
		}
	}
	return d.String()
}

// ksTB is the part of testing.TB that *rapid.T also implements.
type ksTB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// ksCheckMachine checks the machine's internal bookkeeping: per-state counts
// match the table, and each side map holds exactly the records flagged for it,
// in states that may carry it.
func ksCheckMachine(t ksTB, m *Machine) {
	t.Helper()
	var counts [Poisoned + 1]int64
	n, fps, results, pending, ids := 0, 0, 0, 0, 0
	m.table.Range(func(d digest.Digest, r Record) bool {
		n++
		s := r.State()
		if s < Processing || s > Poisoned {
			t.Fatalf("record %v has state %d", d, s)
		}
		counts[s]++
		if r.Attempts() == 0 {
			t.Fatalf("record %v (%v) has attempt 0", d, s)
		}
		if _, ok := m.fingerprints.get(d); ok != r.has(flagFingerprint) {
			t.Fatalf("record %v: fingerprint flag %v, side map %v", d, r.has(flagFingerprint), ok)
		}
		if _, ok := m.results.get(d); ok != r.has(flagResult) {
			t.Fatalf("record %v: result flag %v, side map %v", d, r.has(flagResult), ok)
		}
		if _, ok := m.pending.get(d); ok != r.has(flagEntity) {
			t.Fatalf("record %v: entity flag %v, side map %v", d, r.has(flagEntity), ok)
		}
		if r.has(flagResult) && s != Completed {
			t.Fatalf("record %v: %v with a stored result", d, s)
		}
		if r.has(flagEntity) && s != Processing && s != Failed {
			t.Fatalf("record %v: %v with a pending entity", d, s)
		}
		if _, ok := m.requestIDs.get(d); ok != r.has(flagRequestID) {
			t.Fatalf("record %v: request id flag %v, side map %v", d, r.has(flagRequestID), ok)
		}
		if r.has(flagRequestID) && s != Processing {
			t.Fatalf("record %v: %v with a request id", d, s)
		}
		fps += int(r.flags() & flagFingerprint)
		if r.has(flagResult) {
			results++
		}
		if r.has(flagEntity) {
			pending++
		}
		if r.has(flagRequestID) {
			ids++
		}
		return true
	})
	if n != m.Len() {
		t.Fatalf("Range found %d records, Len %d", n, m.Len())
	}
	if counts != m.counts {
		t.Fatalf("counts %v, table holds %v", m.counts, counts)
	}
	if fps != m.fingerprints.len() || results != m.results.len() || pending != m.pending.len() || ids != m.requestIDs.len() {
		t.Fatalf("side maps hold %d/%d/%d/%d entries, flagged records %d/%d/%d/%d",
			m.fingerprints.len(), m.results.len(), m.pending.len(), m.requestIDs.len(), fps, results, pending, ids)
	}
}
