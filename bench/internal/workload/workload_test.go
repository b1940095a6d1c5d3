package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// call is one call a workload made to the fake.
type call struct {
	method string // Reserve, Complete, ReserveBatch, Memory
	keys   []string
	ttl    time.Duration // lease or retention
}

// fake is a Target that keeps keys in a map and records every call.
type fake struct {
	mu       sync.Mutex
	calls    []call
	state    map[string]string // key -> "held" or "completed"
	tokens   uint64
	failEach int // every failEach-th call fails, 0 never
	n        int
}

var errFake = errors.New("fake: injected failure")

func newFake() *fake { return &fake{state: map[string]string{}} }

func (f *fake) Name() string { return "fake" }

func (f *fake) record(c call) error {
	f.calls = append(f.calls, c)
	f.n++
	if f.failEach > 0 && f.n%f.failEach == 0 {
		return errFake
	}
	return nil
}

func (f *fake) reserveLocked(key string) Reservation {
	if _, ok := f.state[key]; ok {
		return Reservation{Key: key}
	}
	f.state[key] = "held"
	f.tokens++
	return Reservation{Key: key, Acquired: true, Token: f.tokens}
}

func (f *fake) Reserve(_ context.Context, key string, lease time.Duration) (Reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(call{"Reserve", []string{key}, lease}); err != nil {
		return Reservation{}, err
	}
	return f.reserveLocked(key), nil
}

func (f *fake) Complete(_ context.Context, r Reservation, retention time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(call{"Complete", []string{r.Key}, retention}); err != nil {
		return err
	}
	if f.state[r.Key] != "held" || r.Token == 0 {
		return fmt.Errorf("fake: complete of %q not held (token %d)", r.Key, r.Token)
	}
	f.state[r.Key] = "completed"
	return nil
}

func (f *fake) ReserveBatch(_ context.Context, keys []string, lease time.Duration) ([]Reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(call{"ReserveBatch", slices.Clone(keys), lease}); err != nil {
		return nil, err
	}
	out := make([]Reservation, len(keys))
	for i, k := range keys {
		out[i] = f.reserveLocked(k)
	}
	return out, nil
}

// Memory is 100 bytes per key held, over a 1 MB base.
func (f *fake) Memory(context.Context) (Memory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.record(call{method: "Memory"})
	n := int64(len(f.state))
	return Memory{Bytes: 1e6 + 100*n, Source: "fake", Extra: map[string]int64{"heap": 40 * n}}, nil
}

func (f *fake) methods() map[string]int {
	m := map[string]int{}
	for _, c := range f.calls {
		m[c.method]++
	}
	return m
}

func testConfig() Config {
	return Config{
		Concurrency: 4, Duration: time.Minute, MaxCalls: 200,
		Lease: 7 * time.Second, Retention: 3 * time.Hour,
		DupRatio: 0.3, BatchSize: 10, Keys: 4500,
		KeyShape: ShapeUUID, Prefix: "t1:", Seed: 42,
	}
}

func run(t *testing.T, name string, f *fake, cfg Config) Result {
	t.Helper()
	res, err := Run(context.Background(), name, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestReserveUniqueIssuesOneReservePerOp(t *testing.T) {
	f, cfg := newFake(), testConfig()
	res := run(t, ReserveUnique, f, cfg)
	if m := f.methods(); len(m) != 1 || m["Reserve"] != 200 {
		t.Fatalf("calls %v, want 200 Reserve only", m)
	}
	seen := map[string]bool{}
	for _, c := range f.calls {
		if seen[c.keys[0]] || c.ttl != cfg.Lease || !strings.HasPrefix(c.keys[0], cfg.Prefix) {
			t.Fatalf("call %+v: keys must be new, prefixed, with the lease", c)
		}
		seen[c.keys[0]] = true
	}
	if res.Ops != 200 || res.Calls != 200 || res.Errors != 0 || res.DupSuppressed != 0 {
		t.Fatalf("result %+v", res.Result)
	}
}

func TestReserveDupCountsSuppressedDuplicates(t *testing.T) {
	f, cfg := newFake(), testConfig()
	res := run(t, ReserveDup, f, cfg)
	if m := f.methods(); len(m) != 1 || m["Reserve"] != 200 {
		t.Fatalf("calls %v, want 200 Reserve only", m)
	}
	seen := map[string]bool{}
	repeats := 0
	for _, c := range f.calls {
		if seen[c.keys[0]] {
			repeats++
		}
		seen[c.keys[0]] = true
	}
	if repeats == 0 || repeats == 200 {
		t.Fatalf("%d of 200 reserves repeat a key: want a share near 0.3", repeats)
	}
	if res.DupSuppressed != int64(repeats) || res.Errors != 0 || res.Ops != 200 {
		t.Fatalf("dups %d errors %d ops %d, want %d 0 200", res.DupSuppressed, res.Errors, res.Ops, repeats)
	}
}

func TestLifecycleReservesCompletesAndIsRefused(t *testing.T) {
	f, cfg := newFake(), testConfig()
	res := run(t, Lifecycle, f, cfg)
	perKey := map[string][]string{}
	for _, c := range f.calls {
		perKey[c.keys[0]] = append(perKey[c.keys[0]], fmt.Sprintf("%s/%v", c.method, c.ttl))
	}
	if len(perKey) != 200 {
		t.Fatalf("%d keys, want 200 lifecycles", len(perKey))
	}
	want := []string{"Reserve/7s", "Complete/3h0m0s", "Reserve/7s"}
	for k, seq := range perKey {
		if !slices.Equal(seq, want) {
			t.Fatalf("key %s: calls %v, want %v", k, seq, want)
		}
		if f.state[k] != "completed" {
			t.Fatalf("key %s left %q", k, f.state[k])
		}
	}
	if res.Ops != 200 || res.DupSuppressed != 200 || res.Errors != 0 {
		t.Fatalf("result %+v", res.Result)
	}
}

func TestBatchSendsBatchSizeNewKeysPerCall(t *testing.T) {
	f, cfg := newFake(), testConfig()
	res := run(t, Batch, f, cfg)
	if m := f.methods(); len(m) != 1 || m["ReserveBatch"] != 200 {
		t.Fatalf("calls %v, want 200 ReserveBatch only", m)
	}
	for _, c := range f.calls {
		if len(c.keys) != cfg.BatchSize || c.ttl != cfg.Lease {
			t.Fatalf("batch call %d keys lease %v", len(c.keys), c.ttl)
		}
	}
	if len(f.state) != 2000 || res.Ops != 2000 || res.Calls != 200 {
		t.Fatalf("%d keys stored, ops %d calls %d: want 2000 2000 200", len(f.state), res.Ops, res.Calls)
	}
}

func TestFillLoadsKeysAndMeasuresMemory(t *testing.T) {
	f, cfg := newFake(), testConfig()
	cfg.MaxCalls = 0
	res := run(t, Fill, f, cfg)
	m := f.methods()
	if m["Memory"] != 2 || len(m) != 2 {
		t.Fatalf("calls %v: want Memory before and after, ReserveBatch between", m)
	}
	if f.calls[0].method != "Memory" || f.calls[len(f.calls)-1].method != "Memory" {
		t.Fatal("memory must be read before the first and after the last batch")
	}
	total := 0
	for _, c := range f.calls {
		if c.method == "ReserveBatch" {
			total += len(c.keys)
			if len(c.keys) > fillChunk || c.ttl != FillLease {
				t.Fatalf("fill batch of %d keys, lease %v", len(c.keys), c.ttl)
			}
		}
	}
	if total != 4500 || len(f.state) != 4500 {
		t.Fatalf("sent %d keys, stored %d: want 4500", total, len(f.state))
	}
	if res.Fill == nil || res.Fill.Keys != 4500 || res.Fill.BytesPerKey != 100 || res.Fill.ExtraPerKey["heap"] != 40 {
		t.Fatalf("fill %+v, want 4500 keys at 100 bytes", res.Fill)
	}
}

func TestErrorsAreCountedNotHidden(t *testing.T) {
	f, cfg := newFake(), testConfig()
	f.failEach = 10
	res := run(t, ReserveUnique, f, cfg)
	if res.Errors != 20 || res.Ops != 180 || res.ErrorTexts[errFake.Error()] != 20 {
		t.Fatalf("errors %d ops %d texts %v: want 20 180", res.Errors, res.Ops, res.ErrorTexts)
	}
}

// A target that breaks the semantics shows as errors: here a store that
// accepts every reserve.
type acceptAll struct{ *fake }

func (a acceptAll) Reserve(_ context.Context, key string, _ time.Duration) (Reservation, error) {
	return Reservation{Key: key, Acquired: true, Token: 1}, nil
}
func (a acceptAll) Complete(context.Context, Reservation, time.Duration) error { return nil }

func TestLifecycleFlagsDuplicateAcquired(t *testing.T) {
	cfg := testConfig()
	res, err := Run(context.Background(), Lifecycle, acceptAll{newFake()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 200 || res.ErrorTexts[ErrDupAcquired.Error()] != 200 || res.DupSuppressed != 0 {
		t.Fatalf("errors %d texts %v dups %d", res.Errors, res.ErrorTexts, res.DupSuppressed)
	}
}

func TestCompositeKeysAreUnique(t *testing.T) {
	g := newKeyGen("p:", ShapeComposite, 3, 1)
	u := newKeyGen("p:", ShapeUUID, 3, 1)
	seen := map[string]bool{}
	for range 1000 {
		for _, k := range []string{g.next(), u.next()} {
			if seen[k] {
				t.Fatalf("key %s twice", k)
			}
			seen[k] = true
		}
	}
	if k := u.next(); len(k) != len("p:")+36 {
		t.Fatalf("uuid key %q is not 36 bytes after the prefix", k)
	}
}

// TestKeyShapes: the keys are what the fmt verbs that described them
// give, for the same random bits.
func TestKeyShapes(t *testing.T) {
	g := newKeyGen("p:", ShapeComposite, 3, 1)
	g.next()
	if k, want := g.next(), "p:tenant-0003:invoice:2026:0000000002"; k != want {
		t.Fatalf("composite key %q, want %q", k, want)
	}
	worker := 70000 // wider than the 4 hex digits it gets
	u := newKeyGen("p:", ShapeUUID, worker, 9)
	r := rand.New(rand.NewPCG(9, uint64(worker)))
	for seq := uint64(1); seq <= 3; seq++ {
		hi, lo := r.Uint64(), r.Uint32()
		want := fmt.Sprintf("p:%08x-%04x-4%03x-%04x-%04x%08x",
			uint32(hi>>32), uint16(hi>>16), uint16(hi)&0x0fff, 0x8000|uint16(lo)&0x3fff, uint16(worker), uint32(seq))
		if k := u.next(); k != want {
			t.Fatalf("uuid key %q, want %q", k, want)
		}
	}
}

func TestUnknownWorkload(t *testing.T) {
	if _, err := Run(context.Background(), "nope", newFake(), testConfig()); !errors.Is(err, ErrUnknownWorkload) {
		t.Fatalf("err %v", err)
	}
}

// Open loop issues the same calls as closed loop, paced.
func TestRateModeIssuesTheSameCalls(t *testing.T) {
	f, cfg := newFake(), testConfig()
	cfg.Rate = 1e6
	res := run(t, ReserveUnique, f, cfg)
	if m := f.methods(); m["Reserve"] != 200 || res.Ops != 200 || res.Errors != 0 {
		t.Fatalf("calls %v result %+v", m, res.Result)
	}
}

// pastDeadline is a context whose deadline has passed but whose timer has
// not cancelled it yet.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A call failing once the run's deadline has passed was cut off by the end
// of the run, even before the context says so; one failing before it is an
// error.
func TestCutOffAtTheDeadline(t *testing.T) {
	if !cutOff(pastDeadline{context.Background()}) {
		t.Error("deadline passed, context not yet cancelled: not cut off")
	}
	future, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if cutOff(future) || cutOff(context.Background()) {
		t.Error("cut off before the deadline")
	}
	cancel()
	if !cutOff(future) {
		t.Error("cancelled context not cut off")
	}
}
