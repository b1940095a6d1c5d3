package raftlog

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

var long = flag.Bool("long", false, "raftlog: the crash and corruption models run many more seeds")

// The crash and corruption model. Writers, one a group, run random
// operations on a journal (appends, conflicting suffixes replaced,
// compactions, the log emptied as by a snapshot install, terms and
// votes); each operation acknowledged goes into the group's model, raft's
// InmemStore. Then the machine stops (a power cut at a random point in
// memory, or kill -9 of a child process on real files and a power cut
// modelled from what it had synced), writes are torn, and sometimes bits
// are flipped or sectors zeroed. After reopening, each group must hold
// exactly its acknowledged operations (and perhaps the one it had in
// flight), or the open must refuse with ErrCorrupt, which only damage may
// cause: never a silent loss.

// mop is one operation of the model.
type mop struct {
	group  uint64
	kind   byte   // 'a' append lo..hi at term; 'd' delete lo..hi; 't' CurrentTerm; 'w' LastVoteTerm; 'v' LastVoteCand
	lo, hi uint64 //
	term   uint64
	cand   string
}

func (o mop) String() string {
	return fmt.Sprintf("%d %c %d %d %d %s", o.group, o.kind, o.lo, o.hi, o.term, o.cand)
}

func parseMop(s string) (mop, error) {
	var o mop
	var kind string
	if _, err := fmt.Sscanf(s, "%d %s %d %d %d %s", &o.group, &kind, &o.lo, &o.hi, &o.term, &o.cand); err != nil {
		return o, fmt.Errorf("op %q: %w", s, err)
	}
	o.kind = kind[0]
	return o, nil
}

// modelData is the data of entry i of group g written in term: not zero,
// of a length that varies, the same in every process.
func modelData(g, i, term uint64) []byte {
	b := fmt.Appendf(nil, "g%d/i%d/t%d/", g, i, term)
	n := int((g*31 + i*7 + term*13) % 300)
	for k := range n {
		b = append(b, byte('a'+(k+int(i))%26))
	}
	return b
}

func (o mop) logs() []*raft.Log {
	logs := make([]*raft.Log, 0, o.hi-o.lo+1)
	for i := o.lo; i <= o.hi; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: o.term, Type: raft.LogCommand, Data: modelData(o.group, i, o.term)})
	}
	return logs
}

// do runs o on the journal.
func (o mop) do(g *JournalGroup) error {
	switch o.kind {
	case 'a':
		return g.StoreLogs(o.logs())
	case 'd':
		return g.DeleteRange(o.lo, o.hi)
	case 't':
		return g.SetUint64([]byte("CurrentTerm"), o.term)
	case 'w':
		return g.SetUint64([]byte("LastVoteTerm"), o.term)
	default:
		return g.Set([]byte("LastVoteCand"), []byte(o.cand))
	}
}

// model runs o on the model.
func (o mop) model(m *raft.InmemStore) {
	switch o.kind {
	case 'a':
		_ = m.StoreLogs(o.logs())
	case 'd':
		_ = m.DeleteRange(o.lo, o.hi)
	case 't':
		_ = m.SetUint64([]byte("CurrentTerm"), o.term)
	case 'w':
		_ = m.SetUint64([]byte("LastVoteTerm"), o.term)
	default:
		_ = m.Set([]byte("LastVoteCand"), []byte(o.cand))
	}
}

// modelGen makes a group's operations.
type modelGen struct {
	group      uint64
	term, high uint64
}

// next returns an operation for the group, which holds [first, last].
func (s *modelGen) next(rng *rand.Rand, first, last uint64) mop {
	o := mop{group: s.group, cand: "-"}
	switch r := rng.IntN(100); {
	case r < 50 || last == 0:
		o.kind, o.term = 'a', max(s.term, 1)
		o.lo = last + 1
		if last == 0 {
			o.lo = s.high + 1 + uint64(rng.IntN(20))
		}
		o.hi = o.lo + uint64(rng.IntN(8))
		s.high = max(s.high, o.hi)
	case r < 60 && last > first: // a conflicting suffix goes; the next append replaces it
		o.kind, o.lo, o.hi = 'd', last-uint64(rng.IntN(int(last-first))), last
		s.term++
	case r < 75 && last > first: // compaction
		o.kind, o.lo, o.hi = 'd', first, first+uint64(rng.IntN(int(last-first)))
	case r < 77: // a snapshot installed: the log goes
		o.kind, o.lo, o.hi = 'd', first, last
	case r < 90:
		s.term++
		o.kind, o.term = 't', s.term
	case r < 95:
		o.kind, o.term = 'w', s.term
	default:
		o.kind, o.term, o.cand = 'v', s.term, fmt.Sprintf("n%d@%d", rng.IntN(5), s.term)
	}
	return o
}

// modelGroup records a group's acknowledged operations and the one in
// flight.
type modelGroup struct {
	mu       sync.Mutex
	acked    []mop
	inflight *mop
}

func (r *modelGroup) begin(o mop) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight = &o
}

func (r *modelGroup) ack(o mop) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acked, r.inflight = append(r.acked, o), nil
}

// snapshot returns the acknowledged operations and the one in flight.
func (r *modelGroup) snapshot() ([]mop, *mop) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]mop(nil), r.acked...), r.inflight
}

// modelOf runs ops on a new model.
func modelOf(ops []mop) *raft.InmemStore {
	m := raft.NewInmemStore()
	for _, o := range ops {
		o.model(m)
	}
	return m
}

// differs describes how g differs from model m, or returns "".
func differs(g *JournalGroup, m *raft.InmemStore) string {
	mf, _ := m.FirstIndex()
	ml, _ := m.LastIndex()
	if ml == 0 {
		mf = 0
	}
	gf, err := g.FirstIndex()
	if err != nil {
		return err.Error()
	}
	gl, _ := g.LastIndex()
	if gf != mf || gl != ml {
		return fmt.Sprintf("holds [%d, %d], the model [%d, %d]", gf, gl, mf, ml)
	}
	for i := gf; i <= gl && gl != 0; i++ {
		var got, want raft.Log
		if err := g.GetLog(i, &got); err != nil {
			return fmt.Sprintf("log %d: %v", i, err)
		}
		_ = m.GetLog(i, &want)
		if !logsEqual(&got, &want) {
			return fmt.Sprintf("log %d is term %d %q, the model's term %d %q", i, got.Term, got.Data, want.Term, want.Data)
		}
	}
	for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
		// raft's in-memory store answers 0 for a key never set.
		want, _ := m.GetUint64([]byte(k))
		got, err := g.GetUint64([]byte(k))
		if got != want || (err != nil && (want != 0 || !errors.Is(err, ErrKeyNotFound))) {
			return fmt.Sprintf("%s is %d (%v), the model's %d", k, got, err, want)
		}
	}
	want, _ := m.Get([]byte("LastVoteCand"))
	got, err := g.Get([]byte("LastVoteCand"))
	if string(got) != string(want) || (err != nil && len(want) != 0) {
		return fmt.Sprintf("LastVoteCand is %q (%v), the model's %q", got, err, want)
	}
	return ""
}

// checkGroup reports whether g holds exactly acked, or acked and
// inflight.
func checkGroup(g *JournalGroup, acked []mop, inflight *mop) string {
	d := differs(g, modelOf(acked))
	if d == "" || inflight == nil {
		return d
	}
	if differs(g, modelOf(append(acked, *inflight))) == "" {
		return ""
	}
	return d + fmt.Sprintf(" (nor with the operation in flight, %v)", *inflight)
}

// crashOutcome counts how the reopens after crashes went.
type crashOutcome struct {
	clean, refused, damaged int
	cut                     int // reopens that cut a torn tail
}

// modelGroups is how many groups write at once in the crash models.
const modelGroups = 3

// runMemCrash runs the model on a memFS and cuts the power at a random
// file system operation, with the writers running; it reopens what the
// disk holds, with damage or without, and checks it.
func runMemCrash(t *testing.T, seed uint64, out *crashOutcome) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	m := newMemFS()
	const size = 8 << 10
	j := openMem(t, m, size)
	groups := make([]modelGroup, modelGroups+1)
	crashAt := int64(20 + rng.IntN(3000))
	var (
		mu      sync.Mutex
		ops     int64
		crashed *memFS
		acked   [][]mop
		flying  []*mop
		stop    = make(chan struct{})
	)
	crashRng := rand.New(rand.NewPCG(seed, 0xc4a5))
	m.setHook(func(op, name string) error {
		mu.Lock()
		defer mu.Unlock()
		if ops++; ops != crashAt {
			return nil
		}
		// The power goes now, before op: what the writers were told is
		// what the model holds.
		crashed = m.crash(crashRng)
		acked, flying = make([][]mop, len(groups)), make([]*mop, len(groups))
		for id := 1; id < len(groups); id++ {
			acked[id], flying[id] = groups[id].snapshot()
		}
		close(stop)
		return nil
	})
	var wg sync.WaitGroup
	for id := uint64(1); id <= modelGroups; id++ {
		wg.Go(func() {
			wrng := rand.New(rand.NewPCG(seed, id))
			gen, g, rec := modelGen{group: id}, j.Group(id), &groups[id]
			for n := 0; n < 20000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				first, _ := g.FirstIndex()
				last, _ := g.LastIndex()
				o := gen.next(wrng, first, last)
				rec.begin(o)
				if err := o.do(g); err != nil {
					t.Errorf("seed %d: group %d: %v: %v", seed, id, o, err)
					return
				}
				rec.ack(o)
			}
		})
	}
	wg.Wait()
	j.Close()
	if crashed == nil {
		t.Fatalf("seed %d: the run ended before the crash at operation %d of %d", seed, crashAt, ops)
	}
	hurt := damageSegments(crashed.segmentData(memDir), rng)
	var logged strings.Builder
	j2, err := OpenJournal(memDir, JournalOptions{SegmentSize: size, fs: crashed, Logger: builderLogger{&logged}})
	if err != nil {
		if hurt != "" && errors.Is(err, ErrCorrupt) {
			out.refused++
			return
		}
		t.Fatalf("seed %d: open after the crash (damage: %q): %v", seed, hurt, err)
	}
	defer j2.Close()
	if hurt != "" {
		out.damaged++
	} else {
		out.clean++
	}
	if strings.Contains(logged.String(), "cutting a torn tail") {
		out.cut++
	}
	for id := 1; id <= modelGroups; id++ {
		if d := checkGroup(j2.Group(uint64(id)), acked[id], flying[id]); d != "" {
			t.Fatalf("seed %d, crash at operation %d, damage %q: group %d after reopen %s: an acknowledged write lost or one never made (segments %v; log: %s)", seed, crashAt, hurt, id, d, segmentIDs(crashed), logged.String())
		}
	}
	// The journal goes on after recovering.
	mustStore(t, j2.Group(9), makeLogs(9, 1, 5, 1))
	j2.Close()
	checkRange(t, openMem(t, crashed, size).Group(9), 1, 5)
}

// damageSegments damages, or not, the synced bytes of the segments (the
// process's view, which after a crash is the disk's), and says what it
// did. It flips a bit anywhere in a segment's frames, or zeroes a sector,
// but none that holds a byte of the last segment's two last frames: a
// zeroed sector there cannot be told from a write the crash tore (the last
// frame may be the one that was being written, and the one before it the
// last that was synced), by this journal or any other.
func damageSegments(segs map[uint64][]byte, rng *rand.Rand) string {
	if len(segs) == 0 || rng.IntN(3) == 0 {
		return ""
	}
	var ids []uint64
	for id := range segs {
		ids = append(ids, id)
	}
	slicesSort(ids)
	id := ids[rng.IntN(len(ids))]
	data := segs[id]
	var starts []int
	end := 0
	for end < len(data) {
		h, ok := validFrame(data[end:], id)
		if !ok {
			break
		}
		starts = append(starts, end)
		end += h.frameLen()
	}
	if end == 0 {
		return ""
	}
	if rng.IntN(2) == 0 {
		at := rng.IntN(end)
		data[at] ^= 1 << rng.IntN(8)
		return fmt.Sprintf("bit flipped in segment %d at %d", id, at)
	}
	limit := end
	if id == ids[len(ids)-1] {
		if len(starts) < 3 {
			return ""
		}
		limit = starts[len(starts)-2]
	}
	if limit < sectorSize {
		return ""
	}
	s := rng.IntN(limit/sectorSize) * sectorSize
	clear(data[s : s+sectorSize])
	return fmt.Sprintf("sector zeroed in segment %d at %d", id, s)
}

func slicesSort(ids []uint64) {
	for i := 1; i < len(ids); i++ {
		for k := i; k > 0 && ids[k] < ids[k-1]; k-- {
			ids[k], ids[k-1] = ids[k-1], ids[k]
		}
	}
}

// The crash and corruption model in memory: power cuts at random points,
// torn writes, lost directory changes, flipped bits and zeroed sectors.
func TestJournalCrashModel(t *testing.T) {
	seeds := 60
	if *long {
		seeds = 3000
	}
	// A torn tail to cut comes in about one seed in thirty, as the
	// writers' timing falls (0 to 3 in 60 seeds): past the planned seeds,
	// more run until every outcome has been seen, ten times as many at
	// most, so that the check below fails only when one never comes.
	var out crashOutcome
	run := uint64(0)
	for ; run < uint64(seeds) || ((out.refused == 0 || out.clean == 0 || out.cut == 0) && run < 10*uint64(seeds)); run++ {
		runMemCrash(t, run, &out)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d seeds: %d reopened after a crash alone (%d cutting a torn tail), %d after damage too, %d refused with ErrCorrupt (damage only)",
		run, out.clean, out.cut, out.damaged, out.refused)
	if out.refused == 0 || out.clean == 0 || out.cut == 0 {
		t.Fatalf("the seeds never refused or never reopened cleanly: %+v", out)
	}
}

// builderLogger writes a journal's log lines to a strings.Builder.
type builderLogger struct{ b *strings.Builder }

func (l builderLogger) Infof(format string, args ...any)  { fmt.Fprintf(l.b, format+"\n", args...) }
func (l builderLogger) Errorf(format string, args ...any) { fmt.Fprintf(l.b, format+"\n", args...) }
func (l builderLogger) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
