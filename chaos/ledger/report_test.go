package ledger

import (
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// Every payment is published, each copy after its original, and the
// poisonous payment is one that is not unpayable.
func TestSchedule(t *testing.T) {
	k := newKinds(Config{messages: 1000, poisonEvery: 100, poisonous: true})
	if k.poisonous != 333 || k.unpayableCount() != 10 || k.healthyCount() != 989 {
		t.Fatalf("poisonous %d, unpayable %d, healthy %d", k.poisonous, k.unpayableCount(), k.healthyCount())
	}
	if k7 := newKinds(Config{messages: 7, poisonEvery: 3, poisonous: true}); k7.poisonous != 3 {
		t.Fatalf("the poisonous payment of 7 with every third unpayable is %d, want 3 (2 is unpayable)", k7.poisonous)
	}
	ps, dups := schedule(k, 0.2, rand.New(rand.NewPCG(1, 2)))
	if dups < 100 || len(ps) != 1000+dups {
		t.Fatalf("%d payments with %d duplicates", len(ps), dups)
	}
	// The first of each payment's copies come in order; a payment comes
	// once or twice.
	seen, next := map[string]int{}, 0
	for _, p := range ps {
		i := paymentIndex(p.key)
		if p.body != k.body(i) {
			t.Fatalf("%s has body %q, want %q", p.key, p.body, k.body(i))
		}
		if seen[p.key] == 0 {
			if i != next {
				t.Fatalf("payment %d comes first where %d should", i, next)
			}
			next++
		}
		seen[p.key]++
	}
	if next != 1000 || len(ps)-len(seen) != dups {
		t.Fatalf("%d distinct payments of %d, %d copies", next, len(ps), dups)
	}
	for key, n := range seen {
		if n > 2 {
			t.Fatalf("%s comes %d times", key, n)
		}
	}
	if ps[0].body != payableBody || k.body(333) != poisonousBody || k.body(99) != unpayableBody {
		t.Fatal("the bodies of payments 0, 333 and 99")
	}
}

func TestGridReason(t *testing.T) {
	for in, want := range map[string]string{
		`poisoned: client: handler: unpayable amount "-100"`: `poisoned: unpayable amount "-100"`,
		`poisoned: client: poisoned (attempts: 5)`:           `poisoned: answered POISONED at Reserve`,
		`mismatch: client: fingerprint mismatch`:             `mismatch: fingerprint mismatch`,
		`no_key`:                                             `no_key`,
	} {
		if got := gridReason(in); got != want {
			t.Errorf("gridReason(%q) = %q, want %q", in, got, want)
		}
	}
}

// The verdict as data: what was applied and set aside, against the kinds
// of the payments.
func TestJudge(t *testing.T) {
	k := newKinds(Config{messages: 10, poisonEvery: 5, poisonous: true}) // unpayable 4 and 9, poisonous 3
	applied := func(keys ...int) map[string]bool {
		m := map[string]bool{}
		for _, i := range keys {
			m[paymentKey(i)] = true
		}
		return m
	}
	dl := func(i int, reason string) deadLetter { return deadLetter{key: paymentKey(i), reason: reason} }
	for _, c := range []struct {
		name    string
		applied map[string]bool
		dead    []deadLetter
		ok      bool
		check   func(Report) bool
	}{
		{"pass", applied(0, 1, 2, 5, 6, 7, 8),
			[]deadLetter{dl(4, "poisoned: unpayable"), dl(9, "poisoned: unpayable"), dl(3, "poisoned: answered POISONED at Reserve"), dl(9, "poisoned: answered POISONED at Reserve")},
			true, func(r Report) bool {
				return r.Poisoned == 3 && r.DeadLettered == 4 && r.Poisonous.Fate == fateDeadLettered && r.PoisonReasons["poisoned: unpayable"] == 2
			}},
		{"a healthy payment dead-lettered, applied before", applied(0, 1, 2, 5, 6, 7, 8),
			[]deadLetter{dl(4, "x"), dl(9, "x"), dl(3, "x"), dl(6, "x")},
			false, func(r Report) bool {
				return r.PoisonedPayable == 1 && r.HealthyDeadLetteredApplied == 1 && r.Lost == 0 && reflect.DeepEqual(r.HealthyDeadLettered, []string{paymentKey(6)})
			}},
		{"a healthy payment dead-lettered, lost", applied(0, 1, 2, 5, 7, 8),
			[]deadLetter{dl(4, "x"), dl(9, "x"), dl(3, "x"), dl(6, "x")},
			false, func(r Report) bool { return r.PoisonedPayable == 1 && r.Lost == 1 }},
		{"the poisonous payment given up by the broker", applied(0, 1, 2, 5, 6, 7, 8),
			[]deadLetter{dl(4, "x"), dl(9, "x"), {key: paymentKey(3), reason: "broker: max deliveries (10)", dropped: true}},
			false, func(r Report) bool {
				return r.Poisonous.Fate == "dropped by the broker" && r.BrokerDropped == 1 && r.Poisoned == 2
			}},
		{"an unpayable payment missing", applied(0, 1, 2, 5, 6, 7, 8),
			[]deadLetter{dl(4, "x"), dl(3, "x")},
			false, func(r Report) bool { return r.UnpayableNotDeadLettered == 1 && r.Lost == 0 }},
	} {
		tl := newTally()
		tl.add(c.dead)
		r := Report{PoisonReasons: map[string]int{}}
		r.judge(k, c.applied, tl)
		if r.OK() != c.ok || !c.check(r) {
			t.Errorf("%s: OK %v, report %+v, poisonous %+v", c.name, r.OK(), r, r.Poisonous)
		}
		PrintReport(io.Discard, r, false)
	}
}

// The fleet notes what the poisonous payment's crashes left running from
// the consumers' stderr, and passes every line on.
func TestFleetReadsPoisonousCrashes(t *testing.T) {
	var log strings.Builder
	f := &fleet{log: &log}
	f.read(strings.NewReader("a line\n" + poisonousMark + " 17 (pid 1, pay-0000003 on attempt 2)\n" + poisonousMark + " 0 (pid 2, pay-0000003 on attempt 3)\n"))
	if got := f.poisonousCrashes(); !reflect.DeepEqual(got, []int{17, 0}) {
		t.Errorf("crashes %v, want [17 0]", got)
	}
	if strings.Count(log.String(), "\n") != 3 {
		t.Errorf("log %q", log.String())
	}
}
