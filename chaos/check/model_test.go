package check_test

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/client"
)

const (
	hour  = int64(time.Hour / time.Millisecond)
	day   = 24 * hour
	t0    = int64(1_800_000_000_000) // a grid stamp, Unix ms
	keyA  = "a"
	lease = hour
)

// hist builds a history by hand. Times are abstract ticks.
type hist struct {
	ops []porcupine.Operation
	t   int64
}

// seq appends an operation that runs alone, after everything so far.
func (h *hist) seq(client int, in check.Input, out check.Output) *hist {
	h.t += 10
	return h.at(client, h.t, h.t+5, in, out)
}

// at appends an operation over [call, ret] (ret math.MaxInt64: open end).
func (h *hist) at(client int, call, ret int64, in check.Input, out check.Output) *hist {
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.t = max(h.t, min(ret, call+5))
	return h
}

// unknown appends an operation with an open end, called after everything so far.
func (h *hist) unknown(client int, in check.Input) *hist {
	h.t += 10
	return h.at(client, h.t, math.MaxInt64, in, check.Output{Unknown: true})
}

func reserve(key string) check.Input {
	return check.Input{Key: key, Kind: check.KindReserve, Lease: lease, MaxAttempts: 3, Retention: day}
}
func complete(key string, tok uint64, res string) check.Input {
	return check.Input{Key: key, Kind: check.KindComplete, Token: tok, Result: res, Retention: day}
}
func fail(key string, tok uint64) check.Input {
	return check.Input{Key: key, Kind: check.KindFail, Token: tok, RetryAfter: hour, Retention: day}
}
func extend(key string, tok uint64, l int64) check.Input {
	return check.Input{Key: key, Kind: check.KindExtend, Token: tok, Lease: l}
}
func release(key string, tok uint64) check.Input {
	return check.Input{Key: key, Kind: check.KindRelease, Token: tok}
}
func get(key string) check.Input    { return check.Input{Key: key, Kind: check.KindGet} }
func forget(key string) check.Input { return check.Input{Key: key, Kind: check.KindForget} }

func acquired(tok uint64, att int, now, l int64) check.Output {
	return check.Output{Outcome: client.OutcomeAcquired, State: client.StateProcessing, Token: tok, Attempt: att, Deadline: now + l, Now: now}
}
func busy(att int, dl, now int64) check.Output {
	return check.Output{Outcome: client.OutcomeBusy, State: client.StateProcessing, Attempt: att, Deadline: dl, Now: now}
}
func completed(o client.Outcome, tok uint64, res string, dl, now int64) check.Output {
	return check.Output{Outcome: o, State: client.StateCompleted, Token: tok, Attempt: 1, Deadline: dl, Now: now, Result: res}
}
func processing(tok uint64, att int, dl, now int64) check.Output {
	return check.Output{Outcome: client.OutcomeOK, State: client.StateProcessing, Token: tok, Attempt: att, Deadline: dl, Now: now}
}
func absentOut(o client.Outcome, now int64) check.Output {
	return check.Output{Outcome: o, State: client.StateAbsent, Now: now}
}

func expect(t *testing.T, name string, h *hist, want porcupine.CheckResult) {
	t.Helper()
	got := porcupine.CheckOperationsTimeout(check.Model(), h.ops, 10*time.Second)
	if got != want {
		t.Errorf("%s: %v, want %v", name, got, want)
	}
}

// TestModelAccepts: histories the grid may produce are linearizable.
func TestModelAccepts(t *testing.T) {
	cases := map[string]*hist{
		"lifecycle": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(1, reserve(keyA), busy(1, t0+lease, t0+1)).
			seq(0, extend(keyA, 10, 2*lease), processing(10, 1, t0+2+2*lease, t0+2)).
			seq(1, get(keyA), processing(0, 1, t0+2+2*lease, t0+3)).
			seq(0, complete(keyA, 10, "r"), completed(client.OutcomeOK, 10, "r", t0+4+day, t0+4)).
			seq(0, complete(keyA, 10, "r"), completed(client.OutcomeOK, 10, "r", t0+4+day, t0+5)).
			seq(1, reserve(keyA), completed(client.OutcomeDuplicate, 10, "r", t0+4+day, t0+6)).
			seq(1, complete(keyA, 9, "x"), check.Output{Outcome: client.OutcomeLeaseLost, State: client.StateCompleted, Attempt: 1, Deadline: t0 + 4 + day, Now: t0 + 7, Result: "r"}).
			seq(1, forget(keyA), check.Output{Outcome: client.OutcomeOK, State: client.StateAbsent, Now: t0 + 8, Existed: true}).
			seq(1, reserve(keyA), acquired(20, 1, t0+9, lease)).
			seq(1, release(keyA, 20), absentOut(client.OutcomeOK, t0+10)).
			seq(0, release(keyA, 20), absentOut(client.OutcomeOK, t0+11)),
		// Two concurrent reserves: either may win.
		"concurrent reserves": new(hist).
			at(0, 0, 100, reserve(keyA), busy(1, t0+1+lease, t0+2)).
			at(1, 10, 50, reserve(keyA), acquired(10, 1, t0+1, lease)),
		// A reserve whose answer was lost granted a token nobody saw (a Get
		// shows no token); the settle that names it pins it.
		"unknown grant revealed": new(hist).
			unknown(0, reserve(keyA)).
			seq(1, get(keyA), processing(0, 1, t0+10+lease, t0+20)).
			seq(1, reserve(keyA), busy(1, t0+10+lease, t0+21)).
			seq(2, complete(keyA, 15, "r"), completed(client.OutcomeOK, 15, "r", t0+22+day, t0+22)),
		// An Extend never shortens a lease: a shorter one keeps the deadline.
		"shorter extend keeps the deadline": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(0, extend(keyA, 10, 1000), processing(10, 1, t0+lease, t0+1)).
			seq(1, get(keyA), processing(0, 1, t0+lease, t0+2)),
		// The same after an Extend whose answer was lost.
		"unknown extend, shorter": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			unknown(0, extend(keyA, 10, 1000)).
			seq(1, get(keyA), processing(0, 1, t0+lease, t0+20)),
		// A complete with an open end may land late: after a BUSY, before
		// the DUPLICATE.
		"unknown settle lands late": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			unknown(0, complete(keyA, 10, "r")).
			seq(1, reserve(keyA), busy(1, t0+lease, t0+5)).
			seq(1, reserve(keyA), completed(client.OutcomeDuplicate, 10, "r", t0+7+day, t0+9)),
		// Or never: the open end allows no effect at all.
		"unknown settle never lands": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			unknown(0, fail(keyA, 10)).
			seq(1, get(keyA), processing(0, 1, t0+lease, t0+5)),
		// An expired lease is taken over by the next attempt with a larger
		// token, and the old holder's settle is refused.
		"expiry takeover": new(hist).
			seq(0, check.Input{Key: keyA, Kind: check.KindReserve, Lease: 1000, MaxAttempts: 3}, acquired(10, 1, t0, 1000)).
			seq(1, reserve(keyA), acquired(20, 2, t0+1000, lease)).
			seq(0, complete(keyA, 10, "late"), check.Output{Outcome: client.OutcomeLeaseLost, State: client.StateProcessing, Attempt: 2, Deadline: t0 + 1000 + lease, Now: t0 + 1001}),
		// A completed key past its retention is absent again.
		"retention ends": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(0, check.Input{Key: keyA, Kind: check.KindComplete, Token: 10, Retention: 500}, completed(client.OutcomeOK, 10, "", t0+1+500, t0+1)).
			seq(1, get(keyA), absentOut(client.OutcomeOK, t0+501)).
			seq(1, reserve(keyA), acquired(30, 1, t0+502, lease)),
		// Fail poisons the key once attempts reach max_attempts.
		"fail poisons at max attempts": new(hist).
			seq(0, check.Input{Key: keyA, Kind: check.KindReserve, Lease: lease, MaxAttempts: 1}, acquired(10, 1, t0, lease)).
			seq(0, fail(keyA, 10), check.Output{Outcome: client.OutcomeOK, State: client.StatePoisoned, Token: 10, Attempt: 1, Deadline: t0 + 1 + day, Now: t0 + 1}).
			seq(1, reserve(keyA), check.Output{Outcome: client.OutcomePoisoned, State: client.StatePoisoned, Token: 10, Attempt: 1, Deadline: t0 + 1 + day, Now: t0 + 2}),
		// Zero fields take the grid's defaults: a 30 s lease, 5 attempts, a
		// 7-day retention, a backoff of 1 s after the first failed attempt.
		"grid defaults": new(hist).
			seq(0, check.Input{Key: keyA, Kind: check.KindReserve}, acquired(10, 1, t0, 30_000)).
			seq(0, check.Input{Key: keyA, Kind: check.KindFail, Token: 10}, check.Output{Outcome: client.OutcomeOK, State: client.StateFailed, Token: 10, Attempt: 1, Deadline: t0 + 1 + 1000, Now: t0 + 1}).
			seq(0, check.Input{Key: keyA, Kind: check.KindReserve}, acquired(20, 2, t0+1001, 30_000)).
			seq(0, check.Input{Key: keyA, Kind: check.KindComplete, Token: 20}, check.Output{Outcome: client.OutcomeOK, State: client.StateCompleted, Token: 20, Attempt: 2, Deadline: t0 + 1002 + 7*day, Now: t0 + 1002}),
		// A read stamped ahead of a later write (a ReadIndex read by the
		// leader's clock) may see a record expired that the write still sees.
		"read stamped ahead of a write": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(0, check.Input{Key: keyA, Kind: check.KindComplete, Token: 10, Retention: 500}, completed(client.OutcomeOK, 10, "", t0+1+500, t0+1)).
			seq(1, get(keyA), absentOut(client.OutcomeOK, t0+600)).
			seq(1, reserve(keyA), completed(client.OutcomeDuplicate, 10, "", t0+1+500, t0+400)),
	}
	for name, h := range cases {
		expect(t, name, h, porcupine.Ok)
	}
}

// TestModelRejects: histories no correct grid produces are caught.
func TestModelRejects(t *testing.T) {
	cases := map[string]*hist{
		"two holders, sequential": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(1, reserve(keyA), acquired(11, 1, t0+1, lease)),
		"two holders, concurrent": new(hist).
			at(0, 0, 100, reserve(keyA), acquired(10, 1, t0, lease)).
			at(1, 0, 100, reserve(keyA), acquired(11, 1, t0, lease)),
		"two holders around an unknown op that cannot settle": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			unknown(2, complete(keyA, 99, "not the holder")).
			seq(1, reserve(keyA), acquired(11, 1, t0+1, lease)),
		"duplicate before any complete": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(1, reserve(keyA), completed(client.OutcomeDuplicate, 10, "r", t0+4+day, t0+3)).
			seq(0, complete(keyA, 10, "r"), completed(client.OutcomeOK, 10, "r", t0+4+day, t0+4)),
		"token goes backwards": new(hist).
			seq(0, reserve(keyA), acquired(20, 1, t0, lease)).
			seq(0, release(keyA, 20), absentOut(client.OutcomeOK, t0+1)).
			seq(1, reserve(keyA), acquired(10, 1, t0+2, lease)),
		"token goes backwards after an unknown grant": new(hist).
			seq(0, reserve(keyA), acquired(20, 1, t0, lease)).
			seq(0, release(keyA, 20), absentOut(client.OutcomeOK, t0+1)).
			unknown(1, reserve(keyA)).
			seq(2, complete(keyA, 15, "r"), completed(client.OutcomeOK, 15, "r", t0+3+day, t0+3)),
		"absent after an acknowledged complete": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(0, complete(keyA, 10, "r"), completed(client.OutcomeOK, 10, "r", t0+1+day, t0+1)).
			seq(1, get(keyA), absentOut(client.OutcomeOK, t0+2)),
		"acknowledged extend lost": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(0, extend(keyA, 10, 2*lease), processing(10, 1, t0+1+2*lease, t0+1)).
			seq(1, get(keyA), processing(0, 1, t0+lease, t0+2)),
		"extend shortened the lease": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(0, extend(keyA, 10, 1000), processing(10, 1, t0+1+1000, t0+1)),
		"holder's token shown to a reader": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(1, get(keyA), processing(10, 1, t0+lease, t0+1)),
		"settle with a superseded token": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(0, release(keyA, 10), absentOut(client.OutcomeOK, t0+1)).
			seq(1, reserve(keyA), acquired(20, 1, t0+2, lease)).
			seq(0, complete(keyA, 10, "r"), completed(client.OutcomeOK, 10, "r", t0+3+day, t0+3)),
		"holder's token shown to a busy caller": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
			seq(1, reserve(keyA), check.Output{Outcome: client.OutcomeBusy, State: client.StateProcessing, Token: 10, Attempt: 1, Deadline: t0 + lease, Now: t0 + 1}),
		"write stamps go backwards": new(hist).
			seq(0, reserve(keyA), acquired(10, 1, t0+100, lease)).
			seq(0, extend(keyA, 10, lease), processing(10, 1, t0+50+lease, t0+50)),
		"expired lease not taken over": new(hist).
			seq(0, check.Input{Key: keyA, Kind: check.KindReserve, Lease: 1000, MaxAttempts: 3}, acquired(10, 1, t0, 1000)).
			seq(1, reserve(keyA), busy(1, t0+1000, t0+1000)),
	}
	for name, h := range cases {
		expect(t, name, h, porcupine.Illegal)
	}
}

// TestModelPartitionsByKey: keys are independent registers; a violation on
// one key is found among many linearizable ones.
func TestModelPartitionsByKey(t *testing.T) {
	h := new(hist)
	for i := range 20 {
		k := string(rune('a' + i))
		h.seq(i, reserve(k), acquired(uint64(10+i), 1, t0+int64(i), lease))
	}
	expect(t, "20 keys held once each", h, porcupine.Ok)
	h.seq(0, reserve("c"), acquired(100, 1, t0+50, lease))
	expect(t, "key c held twice", h, porcupine.Illegal)
}

// TestCheckWritesVisualization: an illegal history, open-ended operations
// included, gets a visualization file.
func TestCheckWritesVisualization(t *testing.T) {
	h := new(hist).
		seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
		unknown(1, reserve("b")).
		seq(0, complete(keyA, 10, "r"), completed(client.OutcomeOK, 10, "r", t0+1+day, t0+1)).
		seq(1, get(keyA), absentOut(client.OutcomeOK, t0+2))
	dir := t.TempDir()
	v, err := check.Linearizable(h.ops, 10*time.Second, dir, "viz")
	if err != nil {
		t.Fatal(err)
	}
	if v.Result != porcupine.Illegal || v.Visualization == "" {
		t.Fatalf("verdict %+v, want Illegal with a visualization", v)
	}
	b, err := os.ReadFile(v.Visualization)
	if err != nil || !strings.Contains(string(b), "complete(a, tok=10") {
		t.Fatalf("visualization %s: %d bytes, err %v", v.Visualization, len(b), err)
	}
}

// TestFencingTokens: the separate pass over grants in real-time order.
func TestFencingTokens(t *testing.T) {
	ok := new(hist).
		seq(0, reserve(keyA), acquired(10, 1, t0, lease)).
		seq(0, release(keyA, 10), absentOut(client.OutcomeOK, t0+1)).
		at(1, 100, 200, reserve(keyA), acquired(30, 1, t0+2, lease)).
		at(2, 150, 250, reserve("b"), acquired(20, 1, t0+3, lease)). // another key
		unknown(3, reserve(keyA)).
		seq(4, reserve(keyA), acquired(31, 1, t0+4, lease))
	if err := check.FencingTokens(ok.ops); err != nil {
		t.Fatal(err)
	}
	// Concurrent grants may come in any order of tokens.
	concurrent := new(hist).
		at(0, 0, 100, reserve(keyA), acquired(20, 1, t0, lease)).
		at(1, 50, 60, reserve(keyA), acquired(10, 1, t0, lease))
	if err := check.FencingTokens(concurrent.ops); err != nil {
		t.Fatal(err)
	}
	backwards := new(hist).
		seq(0, reserve(keyA), acquired(20, 1, t0, lease)).
		seq(1, reserve("b"), acquired(5, 1, t0, lease)).
		seq(0, release(keyA, 20), absentOut(client.OutcomeOK, t0+1)).
		seq(1, reserve(keyA), acquired(20, 1, t0+2, lease))
	if err := check.FencingTokens(backwards.ops); err == nil {
		t.Fatal("a token granted twice on one key passed")
	}
}

// TestHolders: two leases of one key trusted at once are caught, whoever
// holds them; a lease settled, or trusted only until its safe deadline,
// before the next grant is not.
func TestHolders(t *testing.T) {
	ms := int64(time.Millisecond)
	grant := func(id int, tok uint64, call, ret int64, leaseMs int64) porcupine.Operation {
		return porcupine.Operation{ClientId: id, Call: call * ms, Return: ret * ms,
			Input:  check.Input{Key: keyA, Kind: check.KindReserve, Lease: leaseMs},
			Output: check.Output{Outcome: client.OutcomeAcquired, State: client.StateProcessing, Token: tok, Now: t0, Deadline: t0 + leaseMs}}
	}
	settle := func(id int, tok uint64, call int64) porcupine.Operation {
		return porcupine.Operation{ClientId: id, Call: call * ms, Return: (call + 1) * ms,
			Input:  check.Input{Key: keyA, Kind: check.KindComplete, Token: tok},
			Output: check.Output{Outcome: client.OutcomeOK, State: client.StateCompleted, Token: tok}}
	}
	forget := func(id int, call int64) porcupine.Operation {
		return porcupine.Operation{ClientId: id, Call: call * ms, Return: (call + 1) * ms,
			Input: check.Input{Key: keyA, Kind: check.KindForget}, Output: check.Output{Outcome: client.OutcomeOK}}
	}
	margin := func(lease time.Duration) time.Duration { return lease / 10 }
	cases := []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"settled before the next grant", []porcupine.Operation{grant(1, 1, 0, 5, 1000), settle(1, 1, 100), grant(2, 2, 200, 205, 1000)}, true},
		{"next grant after the safe deadline", []porcupine.Operation{grant(1, 1, 0, 5, 1000), grant(2, 2, 950, 955, 1000)}, true},
		{"next grant inside the safe deadline", []porcupine.Operation{grant(1, 1, 0, 5, 1000), grant(2, 2, 850, 855, 1000)}, false},
		{"settled after the next grant", []porcupine.Operation{grant(1, 1, 0, 5, 1000), grant(2, 2, 300, 305, 1000), settle(1, 1, 400)}, false},
		{"forgotten before the next grant", []porcupine.Operation{grant(1, 1, 0, 5, 1000), forget(3, 100), grant(2, 2, 300, 305, 1000)}, true},
		{"forgotten before the first grant", []porcupine.Operation{forget(3, 0), grant(1, 1, 10, 15, 1000), grant(2, 2, 300, 305, 1000)}, false},
	}
	for _, c := range cases {
		err := check.Holders(c.ops, margin)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), `key "a"`) {
			t.Errorf("%s: the error does not name the key: %v", c.name, err)
		}
	}
}
