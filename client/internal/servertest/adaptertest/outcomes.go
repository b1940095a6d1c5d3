package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
)

// testOutcomes settles every outcome row in few deliveries: completed, a
// duplicate (one key on two messages, the second carried the adapter's
// other way where it has one), a retryable failure in the middle of a lane
// that comes back and succeeds, a poisoned message and one without a key
// set aside with their reasons (or keyed by the adapter, see
// Harness.Keyless); then a reused key (MISMATCH) and an older entity
// version (STALE). Each is acted on and counted as the adapters document.
func testOutcomes(t *testing.T, h Harness) {
	grid, _ := Grid(t)
	b := h.Open(t, 5*time.Second)
	eff := NewEffects()
	var flaky sync.Once
	handler := func(ctx context.Context, body string, l client.Lease) error {
		switch body {
		case "poison":
			return client.Poison(errors.New("unparseable payment"))
		case "flaky":
			failed := false
			flaky.Do(func() { failed = true })
			if failed {
				return client.RetryAfter(errors.New("ledger busy"), 100*time.Millisecond)
			}
		}
		eff.Add(ctx, l)
		return nil
	}
	ok := func(i int) Message {
		return Message{Key: fmt.Sprintf("ok-%d", i), Body: "ok", Correlation: fmt.Sprintf("corr-%d", i)}
	}
	for i := range 10 {
		b.Publish(t, ok(i))
	}
	b.Publish(t, Message{Key: "flaky", Body: "flaky"})
	for i := 10; i < 20; i++ {
		b.Publish(t, ok(i))
	}
	for _, m := range []Message{
		{Key: "dup", Body: "ok"},
		{Key: "dup", Body: "ok", KeyElsewhere: true},
		{Key: "poison", Body: "poison"},
		{Body: "no key"},
		{Key: "balance-v2", Body: "set", Version: 2},
	} {
		m.Lane = 1
		b.Publish(t, m)
	}
	reg := prometheus.NewRegistry()
	counted := func(o adapter.Outcome, a adapter.Action) float64 { return Counted(t, reg, h.Name, o, a) }
	start(t, b, Config{Grid: grid, Handler: handler, InFlight: 64, Registerer: reg})

	applied := []string{"dup", "flaky", "balance-v2"}
	for i := range 20 {
		applied = append(applied, fmt.Sprintf("ok-%d", i))
	}
	dead := map[string]adapter.Outcome{"poison": adapter.Poisoned}
	acked := 20 + 2 + 1 + 1 // the oks, both dups, flaky, version 2
	if h.Keyless == "" {
		dead["no key"] = adapter.NoKey
	} else {
		applied = append(applied, h.Keyless)
		acked++
	}
	testwait.Until(t, 20*time.Second, func() string {
		if why := settled(t, b, len(dead)); why != "" {
			return why + "; effects " + eff.String()
		}
		for _, k := range applied {
			if eff.Get(k) == 0 {
				return k + " not applied yet; effects " + eff.String()
			}
		}
		if n := counted(adapter.Completed, adapter.Ack) + counted(adapter.Duplicate, adapter.Ack); n < float64(acked) {
			return fmt.Sprintf("%v messages acked as completed or duplicate, want %d", n, acked)
		}
		return ""
	})
	checkDeadLetters(t, b, dead)

	// A key reused for another payload, then an entity's older version.
	b.Publish(t, Message{Key: "ok-3", Body: "ok but longer", Lane: 1})
	b.Publish(t, Message{Key: "balance-v1", Body: "set", Version: 1, Lane: 1})
	dead["ok but longer"] = adapter.Mismatch
	testwait.Until(t, 20*time.Second, func() string {
		if why := settled(t, b, len(dead)); why != "" {
			return why
		}
		if counted(adapter.Mismatch, adapter.DeadLetter) < 1 || counted(adapter.Stale, adapter.Ack) < 1 {
			return "the mismatch and the stale version not counted yet"
		}
		return ""
	})
	checkDeadLetters(t, b, dead)

	for i := range 20 {
		if n := eff.Get(fmt.Sprintf("ok-%d", i)); n != 1 {
			t.Errorf("ok-%d applied %d times", i, n)
		}
	}
	once := map[string]int{"dup": 1, "flaky": 1, "balance-v2": 1, "balance-v1": 0}
	if h.Keyless != "" {
		once[h.Keyless] = 1
	}
	for key, want := range once {
		if n := eff.Get(key); n != want {
			t.Errorf("%s applied %d times, want %d", key, n, want)
		}
	}
	if got := eff.Correlation("ok-3"); got != "corr-3" {
		t.Errorf("the handler's context carried correlation id %q, want corr-3", got)
	}
	if g, err := grid.Get(context.Background(), Namespace, "poison"); err != nil || g.State != client.StatePoisoned {
		t.Errorf("poison key: %+v, %v; want POISONED", g, err)
	}
	noKey := 0.0
	if h.Keyless == "" {
		noKey = 1
	}
	for _, want := range []struct {
		o adapter.Outcome
		a adapter.Action
		n float64
	}{
		{adapter.Failed, adapter.Retry, 1}, {adapter.Poisoned, adapter.DeadLetter, 1},
		{adapter.NoKey, adapter.DeadLetter, noKey}, {adapter.Mismatch, adapter.DeadLetter, 1},
		{adapter.Stale, adapter.Ack, 1}, {adapter.Error, adapter.Retry, 0},
	} {
		if got := counted(want.o, want.a); got != want.n {
			t.Errorf("messages %s/%s = %v, want %v", want.o, want.a, got, want.n)
		}
	}
	// Each acked message is counted once, when it is settled: as completed,
	// or as a duplicate when it came again.
	if got := counted(adapter.Completed, adapter.Ack) + counted(adapter.Duplicate, adapter.Ack); got != float64(acked) {
		t.Errorf("messages completed or duplicate, acked: %v, want %d", got, acked)
	}
	dups := counted(adapter.Duplicate, adapter.Ack)
	switch {
	case h.Rewinds == 0 && dups != 1:
		t.Errorf("duplicates %v, want the second dup only", dups)
	case dups < float64(1+h.Rewinds):
		t.Errorf("duplicates %v, want the second dup and the %d messages run again after the retry", dups, h.Rewinds)
	}
	if got := counted(adapter.Busy, adapter.Retry); h.SerialKeys && got != 0 {
		t.Errorf("BUSY %v times; messages of one key taken together must not race", got)
	}
}

// settled says why b is not settled with dead messages set aside, or "".
func settled(t *testing.T, b Broker, dead int) string {
	t.Helper()
	if n := b.Pending(t); n != 0 {
		return fmt.Sprintf("%d messages pending", n)
	}
	if n := len(b.DeadLetters(t)); n != dead {
		return fmt.Sprintf("%d dead letters, want %d", n, dead)
	}
	return ""
}

// checkDeadLetters checks that the messages set aside are want's (body to
// outcome), each with its outcome as the reason.
func checkDeadLetters(t *testing.T, b Broker, want map[string]adapter.Outcome) {
	t.Helper()
	dls := b.DeadLetters(t)
	var bodies, wantBodies []string
	for _, dl := range dls {
		bodies = append(bodies, dl.Body)
	}
	for body := range want {
		wantBodies = append(wantBodies, body)
	}
	sort.Strings(bodies)
	sort.Strings(wantBodies)
	if !slices.Equal(bodies, wantBodies) {
		t.Errorf("dead letters %q, want %q", bodies, wantBodies)
		return
	}
	for _, dl := range dls {
		if o := want[dl.Body]; !strings.HasPrefix(dl.Reason, string(o)+": ") {
			t.Errorf("dead letter %q has reason %q, want %q and its cause", dl.Body, dl.Reason, o)
		}
	}
}
