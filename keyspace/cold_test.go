package keyspace

import (
	"bytes"
	"slices"
	"testing"

	"github.com/l4xg/grid/digest"
)

// memCold is a ColdTier in a map, for the machine's own tests; tiering/ has
// the Pebble one and its tests.
type memCold struct {
	recs   map[digest.Digest]ColdRecord
	puts   int
	purged int
}

var _ ColdTier = (*memCold)(nil)

func newMemCold() *memCold { return &memCold{recs: make(map[digest.Digest]ColdRecord)} }

func (c *memCold) Get(d digest.Digest) (ColdRecord, bool) {
	r, ok := c.recs[d]
	return r, ok
}

func (c *memCold) Put(d digest.Digest, r *ColdRecord) {
	if _, ok := c.recs[d]; ok {
		panic("memCold: Put of a held digest")
	}
	cr := *r
	cr.Result = bytes.Clone(r.Result)
	c.recs[d] = cr
	c.puts++
}

func (c *memCold) Delete(d digest.Digest) {
	if _, ok := c.recs[d]; !ok {
		panic("memCold: Delete of a digest not held")
	}
	delete(c.recs, d)
}

func (c *memCold) Purge(now int64, limit int) int {
	var due []digest.Digest
	for d, r := range c.recs {
		if r.Deadline <= now {
			due = append(due, d)
		}
	}
	slices.SortFunc(due, func(a, b digest.Digest) int { return int(c.recs[a].Deadline - c.recs[b].Deadline) })
	n := min(limit, len(due))
	for _, d := range due[:n] {
		delete(c.recs, d)
	}
	c.purged += n
	return n
}

const (
	hourMs = 60 * 60 * 1000
	dayMs  = 24 * hourMs
)

// tierRun drives a machine with a cold tier through entries.
type tierRun struct {
	t     *testing.T
	m     *Machine
	cold  *memCold
	index uint64
}

func newTierRun(t *testing.T) *tierRun {
	r := &tierRun{t: t, m: NewMachine(), cold: newMemCold()}
	r.m.UseCold(r.cold)
	return r
}

func (r *tierRun) apply(now int64, cmds ...Command) []Result {
	r.index++
	return r.m.Apply(r.index, &Entry{Now: now, Commands: cmds}, nil)
}

// ticks applies ticks at now until a full sweep of the table has passed.
func (r *tierRun) ticks(now int64, p *TierPolicy) {
	for range r.m.table.Bytes()/tabSlotSize/sweepSlotsPerTick + 2 {
		r.index++
		e := Entry{Now: now, Tick: true}
		if p != nil {
			e.HasPolicy, e.Policy = true, *p
		}
		r.m.Apply(r.index, &e, nil)
	}
}

// settleKeys reserves and completes n keys at now with the given retention.
func (r *tierRun) settleKeys(prefix string, n int, now, retention int64) []digest.Digest {
	ds := make([]digest.Digest, n)
	for i := range ds {
		ds[i] = digest.Key("t", []byte(prefix+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676))))
		got := r.apply(now, reserveOf(ds[i], 1000))[0]
		res := r.apply(now, Command{Op: OpComplete, Digest: ds[i], Token: got.Token, Retention: retention, Result: []byte("receipt")})[0]
		if res.Outcome != OutcomeOK {
			r.t.Fatalf("complete %d: %v", i, res.Outcome)
		}
	}
	return ds
}

// TestTierDemoteLookupPurge: a settled record stays hot through the hot
// window, is demoted by the ticks after it, answers DUPLICATE with its result
// from the cold tier, and is purged at its retention end.
func TestTierDemoteLookupPurge(t *testing.T) {
	r := newTierRun(t)
	ds := r.settleKeys("k", 100, 0, 7*dayMs)
	r.ticks(dayMs-1, nil)
	if r.m.Len() != 100 || len(r.cold.recs) != 0 {
		t.Fatalf("inside the hot window: hot %d, cold %d; want 100, 0", r.m.Len(), len(r.cold.recs))
	}
	r.ticks(dayMs, nil)
	if r.m.Len() != 0 || len(r.cold.recs) != 100 || r.m.Stats().Demoted != 100 {
		t.Fatalf("past the hot window: hot %d, cold %d, demoted %d; want 0, 100, 100", r.m.Len(), len(r.cold.recs), r.m.Stats().Demoted)
	}
	if r.m.results.len() != 0 || r.m.resultBytes != 0 {
		t.Fatalf("demoted records left %d results (%d bytes) hot", r.m.results.len(), r.m.resultBytes)
	}
	res := r.apply(2*dayMs, reserveOf(ds[0], 1000))[0]
	if res.Outcome != OutcomeDuplicate || !res.Cold || string(res.Result) != "receipt" || res.CompletedAt != 0 {
		t.Fatalf("reserve of a cold record: %+v; want a cold DUPLICATE with its result, completed at 0", res)
	}
	if g := r.m.Get(ds[1], 2*dayMs, false); g.State != Completed || !g.Cold || g.Deadline != 7*dayMs {
		t.Fatalf("Get of a cold record: %+v", g)
	}
	if f := r.apply(2*dayMs, Command{Op: OpForget, Digest: ds[2]})[0]; !f.Existed || len(r.cold.recs) != 99 {
		t.Fatalf("forget of a cold record: %+v, cold holds %d", f, len(r.cold.recs))
	}
	if g := r.apply(2*dayMs, reserveOf(ds[2], 1000))[0]; g.Outcome != OutcomeAcquired || g.Cold {
		t.Fatalf("reserve after forget: %+v", g)
	}
	r.ticks(7*dayMs, nil)
	if len(r.cold.recs) != 0 || r.m.Stats().Purged != 99 {
		t.Fatalf("at the retention end: cold holds %d, purged %d; want 0, 99", len(r.cold.recs), r.m.Stats().Purged)
	}
	if g := r.apply(7*dayMs, reserveOf(ds[0], 1000))[0]; g.Outcome != OutcomeAcquired {
		t.Fatalf("reserve after the purge: %v", g.Outcome)
	}
}

// TestTierGoneColdRecord: a cold record past its retention reads ABSENT
// before any purge, and a new reserve replaces it in the hot tier.
func TestTierGoneColdRecord(t *testing.T) {
	r := newTierRun(t)
	ds := r.settleKeys("g", 1, 0, 2*dayMs)
	r.ticks(dayMs, nil)
	if len(r.cold.recs) != 1 {
		t.Fatalf("cold holds %d", len(r.cold.recs))
	}
	if g := r.m.Get(ds[0], 2*dayMs, false); g.State != Absent {
		t.Fatalf("Get past retention: %v", g.State)
	}
	if g := r.apply(2*dayMs, reserveOf(ds[0], 1000))[0]; g.Outcome != OutcomeAcquired || len(r.cold.recs) != 0 || r.m.Len() != 1 {
		t.Fatalf("reserve past retention: %v; cold %d, hot %d", g.Outcome, len(r.cold.recs), r.m.Len())
	}
}

// TestTierBudget: over its budget the hot tier demotes settled records
// early, never one in flight, and stops once back under.
func TestTierBudget(t *testing.T) {
	r := newTierRun(t)
	r.settleKeys("s", 200, 0, 7*dayMs)
	for i := range 50 {
		r.apply(0, reserveOf(digest.Key("t", []byte{'p', byte(i)}), 60*60*1000))
	}
	budget := int64(100 * tabSlotSize)
	r.ticks(1, &TierPolicy{HotWindow: dayMs, HotMaxBytes: budget})
	if r.m.Count(Processing) != 50 {
		t.Fatalf("PROCESSING records hot: %d, want 50", r.m.Count(Processing))
	}
	if got := r.m.HotLiveBytes(); got > budget {
		t.Fatalf("hot tier at %d bytes after the sweeps, budget %d", got, budget)
	}
	if st := r.m.Stats(); st.Evicted == 0 || st.Evicted != st.Demoted || int(st.Demoted) != len(r.cold.recs) {
		t.Fatalf("stats %+v, cold %d", st, len(r.cold.recs))
	}
	if r.m.Count(Completed) == 0 {
		t.Fatalf("demoted every settled record: the sweep should stop under budget")
	}
	if r.m.Policy().HotMaxBytes != budget {
		t.Fatalf("policy not kept: %+v", r.m.Policy())
	}
}

// TestTierSnapshotKeepsPolicy: the tiering policy set by ticks survives a
// snapshot round trip.
func TestTierSnapshotKeepsPolicy(t *testing.T) {
	r := newTierRun(t)
	p := TierPolicy{HotWindow: 1234, HotMaxBytes: 5678}
	r.ticks(1, &p)
	var buf bytes.Buffer
	s := r.m.Snapshot()
	if _, err := s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	s.Release()
	m, err := ReadSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if m.Policy() != p {
		t.Fatalf("restored policy %+v, want %+v", m.Policy(), p)
	}
}
