package keyspace

import (
	"reflect"
	"testing"

	"github.com/l4xg/grid/digest"
	"pgregory.net/rapid"
)

func reserveOf(d digest.Digest, lease int64) Command {
	return Command{Op: OpReserve, Digest: d, Lease: lease, MaxAttempts: 3, Retention: 10_000}
}

// TestMachineDeterminism: two machines fed the same entries hold the same
// state, table layout and sweep position included, and give the same results.
// (WriteTo bytes are not compared: the side maps are written in map order.)
func TestMachineDeterminism(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		run, log := loggedMdlRun(rt)
		twin := NewMachine()
		for _, l := range log {
			if got := twin.Apply(l.index, &l.entry, nil); !reflect.DeepEqual(got, l.results) {
				rt.Fatalf("index %d: twin results differ:\n got %+v\nwant %+v", l.index, got, l.results)
			}
		}
		ksCompareState(rt, "twin", ksStateOf(twin), ksStateOf(run.m))
		if twin.Stats() != run.m.Stats() {
			rt.Fatalf("twin stats %+v, original %+v", twin.Stats(), run.m.Stats())
		}
	})
}

// TestMachineApplyAppends: Apply appends one result per command to out and
// keeps what out held.
func TestMachineApplyAppends(t *testing.T) {
	m := NewMachine()
	out := []Result{{Outcome: OutcomeMismatch}}
	out = m.Apply(1, &Entry{Now: 10, Commands: []Command{reserveOf(tabTestDigest(1), 100), reserveOf(tabTestDigest(2), 100)}}, out)
	if len(out) != 3 || out[0].Outcome != OutcomeMismatch || out[1].Outcome != OutcomeAcquired || out[2].Outcome != OutcomeAcquired {
		t.Fatalf("Apply appended %+v", out)
	}
	if out := m.Apply(2, &Entry{Now: 5, Tick: true}, nil); len(out) != 0 || m.Now() != 10 {
		t.Fatalf("empty tick: %d results, Now %d", len(out), m.Now())
	}
}

// TestMachineCount: Count is zero for states never stored.
func TestMachineCount(t *testing.T) {
	m := NewMachine()
	m.Apply(1, &Entry{Now: 10, Commands: []Command{reserveOf(tabTestDigest(1), 100)}}, nil)
	for _, s := range []State{0, Absent, Poisoned + 1, 255} {
		if n := m.Count(s); n != 0 {
			t.Errorf("Count(%d) = %d", s, n)
		}
	}
	if m.Count(Processing) != 1 || m.Len() != 1 || m.HotBytes() <= 0 {
		t.Errorf("Count(PROCESSING) %d, Len %d, HotBytes %d", m.Count(Processing), m.Len(), m.HotBytes())
	}
}

// TestMachineFullEntry: an entry of MaxEntryCommands grants take positions
// 0..MaxEntryCommands-1, all below the next index's first token.
func TestMachineFullEntry(t *testing.T) {
	m := NewMachine()
	e := Entry{Now: 1}
	for i := range uint64(MaxEntryCommands) {
		e.Commands = append(e.Commands, reserveOf(tabTestDigest(i), 1000))
	}
	const index = 7
	res := m.Apply(index, &e, nil)
	for i, r := range res {
		if r.Outcome != OutcomeAcquired || r.Token != index<<16|uint64(i) {
			t.Fatalf("command %d: %v token %d", i, r.Outcome, r.Token)
		}
	}
	next := m.Apply(index+1, &Entry{Now: 1, Commands: []Command{reserveOf(tabTestDigest(1<<20), 1000)}}, nil)
	if next[0].Token <= res[len(res)-1].Token {
		t.Fatalf("next index's token %d not above %d", next[0].Token, res[len(res)-1].Token)
	}
}

// TestMachineSweepBounded: a Tick reclaims at most a bounded window of the
// table, and successive ticks reclaim every expired record and nothing else.
func TestMachineSweepBounded(t *testing.T) {
	const n = 20_000
	m := NewMachine()
	var index uint64
	for i := uint64(0); i < n; i += 100 {
		e := Entry{Now: 1000}
		for j := i; j < i+100; j++ {
			e.Commands = append(e.Commands, reserveOf(tabTestDigest(j), 1000))
		}
		index++
		m.Apply(index, &e, nil)
	}
	// Complete the even keys with a short retention; the odd ones stay held.
	for i := uint64(0); i < n; i += 100 {
		e := Entry{Now: 1000}
		for j := i; j < i+100; j += 2 {
			tok := (j/100+1)<<16 | j%100
			e.Commands = append(e.Commands, Command{Op: OpComplete, Digest: tabTestDigest(j), Token: tok, Retention: 500})
		}
		index++
		for _, r := range m.Apply(index, &e, nil) {
			if r.Outcome != OutcomeOK {
				t.Fatalf("complete: %v", r.Outcome)
			}
		}
	}
	slots := m.HotBytes() / tabSlotSize
	ticks := 0
	for m.Count(Completed) > 0 {
		before := m.Len()
		index++
		m.Apply(index, &Entry{Now: 1500, Tick: true}, nil)
		ticks++
		if dropped := before - m.Len(); dropped > sweepSlotsPerTick {
			t.Fatalf("one tick reclaimed %d records, more than its window of %d slots", dropped, sweepSlotsPerTick)
		}
		if ticks > 3*slots/sweepSlotsPerTick+3 {
			t.Fatalf("%d ticks and %d expired records left", ticks, m.Count(Completed))
		}
		ksCheckMachine(t, m)
	}
	if m.Len() != n/2 || m.Count(Processing) != n/2 || m.Stats().Reclaimed != n/2 {
		t.Fatalf("after the sweep: Len %d, PROCESSING %d, reclaimed %d; want %d each", m.Len(), m.Count(Processing), m.Stats().Reclaimed, n/2)
	}
	if ticks < n/2/sweepSlotsPerTick {
		t.Fatalf("swept %d records in %d ticks: the window is not bounded", n/2, ticks)
	}
}

// TestMachineEntitySweep: committed entity versions are kept while any
// record that raised them is retained and dropped by the first tick at or
// past their deadline, the latest raise winning.
func TestMachineEntitySweep(t *testing.T) {
	m := NewMachine()
	e := digest.Entity("t", []byte("order"))
	index := uint64(0)
	settle := func(key string, version uint64, now, retention int64) {
		t.Helper()
		d := digest.Record("t", []byte(key), []byte("order"))
		c := reserveOf(d, 1000)
		c.HasEntity, c.Entity, c.Version = true, e, version
		index++
		m.Apply(index, &Entry{Now: now, Commands: []Command{c}}, nil)
		index++
		res := m.Apply(index, &Entry{Now: now, Commands: []Command{{Op: OpComplete, Digest: d, Token: (index - 1) << 16, Retention: retention}}}, nil)
		if res[0].Outcome != OutcomeOK {
			t.Fatalf("complete %s: %v", key, res[0].Outcome)
		}
	}
	settle("a", 3, 100, 1100) // deadline 1200
	settle("b", 4, 150, 1450) // raises the deadline to 1600
	if ev, ok := m.entities.get(e); !ok || ev.version != 4 || ev.deadline != 1600 {
		t.Fatalf("entity after completes: %+v, %v", ev, ok)
	}
	for _, now := range []int64{1199, 1200, 1599} {
		index++
		m.Apply(index, &Entry{Now: now, Tick: true}, nil)
		if _, ok := m.entities.get(e); !ok {
			t.Fatalf("entity dropped by the tick at %d, before its deadline 1600", now)
		}
	}
	index++
	m.Apply(index, &Entry{Now: 1600, Tick: true}, nil)
	if _, ok := m.entities.get(e); ok {
		t.Fatalf("entity kept past its deadline")
	}
	if m.expiring.Len() != 0 {
		t.Fatalf("%d deadlines left in the heap", m.expiring.Len())
	}
}

// TestHotLiveBytesCountsRequestIDs: the hot tier's budget counts the
// request id a PROCESSING record keeps, and stops counting it once the
// record is settled.
func TestHotLiveBytesCountsRequestIDs(t *testing.T) {
	plain, withID := NewMachine(), NewMachine()
	d := digest.Key("t", []byte("k"))
	c := reserveOf(d, 1000)
	granted := plain.Apply(1, &Entry{Now: 1, Commands: []Command{c}}, nil)[0]
	c.HasRequestID, c.RequestID = true, RequestIDHash([]byte("call"))
	withID.Apply(1, &Entry{Now: 1, Commands: []Command{c}}, nil)
	if got, want := withID.HotLiveBytes()-plain.HotLiveBytes(), int64(sideEntryBytes); got != want {
		t.Fatalf("a request id adds %d bytes, want %d", got, want)
	}
	done := Command{Op: OpComplete, Digest: d, Token: granted.Token, Retention: 5000}
	plain.Apply(2, &Entry{Now: 2, Commands: []Command{done}}, nil)
	withID.Apply(2, &Entry{Now: 2, Commands: []Command{done}}, nil)
	if plain.HotLiveBytes() != withID.HotLiveBytes() || withID.requestIDs.len() != 0 {
		t.Fatalf("after complete: %d vs %d bytes, %d request ids held", withID.HotLiveBytes(), plain.HotLiveBytes(), withID.requestIDs.len())
	}
}
