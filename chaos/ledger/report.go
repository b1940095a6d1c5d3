package ledger

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// Report is what the run found.
type Report struct {
	Broker             string `json:"broker"`
	Produced           int    `json:"produced"`
	DuplicatesInjected int    `json:"duplicates_injected"`
	Applied            int    `json:"applied"`
	DuplicateEffects   int    `json:"duplicate_effects"`
	// Lost are healthy payments (payable, not the poisonous one) never
	// applied.
	Lost int `json:"lost"`
	// Poisoned is how many payments were dead-lettered, PoisonReasons why
	// (the reason of each payment's first dead letter).
	Poisoned      int            `json:"poisoned"`
	PoisonReasons map[string]int `json:"poison_reasons"`
	// PoisonedPayable are healthy payments dead-lettered: a failure,
	// whether they were applied before (HealthyDeadLetteredApplied) or
	// are lost. HealthyDeadLettered names the first of them.
	PoisonedPayable            int      `json:"poisoned_payable"`
	HealthyDeadLetteredApplied int      `json:"healthy_dead_lettered_applied"`
	HealthyDeadLettered        []string `json:"healthy_dead_lettered,omitempty"`
	// UnpayableNotDeadLettered are unpayable payments that did not reach
	// the dead letters.
	UnpayableNotDeadLettered int `json:"unpayable_not_dead_lettered"`
	// Poisonous is the fate of the payment that crashes its consumer
	// (nil when the run had none).
	Poisonous *PoisonousFate `json:"poisonous,omitempty"`
	// BrokerDropped are messages the broker gave up after their
	// deliveries without a copy anywhere (JetStream's MaxDeliver).
	BrokerDropped int `json:"broker_dropped"`
	// DeadLettered counts the dead letters, copies of one payment
	// included.
	DeadLettered     int `json:"dead_lettered"`
	ConsumerKills    int `json:"consumer_kills"`
	ConsumerJoins    int `json:"consumer_joins"`
	ConsumerLeaves   int `json:"consumer_leaves"`
	ExitsAfterCommit int `json:"exits_after_commit"`
	GridNodeKills    int `json:"grid_node_kills"`
	// Unfinished says why the run ended before every payment was settled
	// and the broker empty ("stalled: ...", "timed out ..."): a failure.
	Unfinished string  `json:"unfinished,omitempty"`
	Seconds    float64 `json:"seconds"`
	Seed       uint64  `json:"seed"`
}

// PoisonousFate is what became of the poisonous payment.
type PoisonousFate struct {
	Key string `json:"key"`
	// Fate is "dead-lettered", "dropped by the broker", "applied" or
	// "not settled"; Reason the dead letter's or the broker's.
	Fate   string `json:"fate"`
	Reason string `json:"reason,omitempty"`
	// Crashes are the consumer processes it ended; Beside the handlers
	// that ran beside it in each, as the consumer reported.
	Crashes int   `json:"crashes"`
	Beside  []int `json:"beside"`
}

// Dead-lettered is the poisonous payment's one good fate.
const fateDeadLettered = "dead-lettered"

// OK is the verdict: the run finished, no payment applied twice, none
// lost, and the dead letters exactly the unpayable payments and the
// poisonous one.
func (r Report) OK() bool {
	return r.Unfinished == "" && r.DuplicateEffects == 0 && r.Lost == 0 && r.PoisonedPayable == 0 && r.UnpayableNotDeadLettered == 0 &&
		(r.Poisonous == nil || r.Poisonous.Fate == fateDeadLettered)
}

// tally collects the dead letters a run's broker gives.
type tally struct {
	dead    map[string]string // key -> the reason of its first dead letter
	dropped map[string]string // key -> the broker's reason
	copies  int
}

func newTally() *tally { return &tally{dead: map[string]string{}, dropped: map[string]string{}} }

func (t *tally) add(dls []deadLetter) {
	for _, d := range dls {
		m := t.dead
		if d.dropped {
			m = t.dropped
		} else {
			t.copies++
		}
		if _, seen := m[d.key]; !seen {
			m[d.key] = d.reason
		}
	}
}

// setAside are the keys of the payments dead-lettered or dropped.
func (t *tally) setAside() []string {
	keys := make([]string, 0, len(t.dead)+len(t.dropped))
	for key := range t.dead {
		keys = append(keys, key)
	}
	for key := range t.dropped {
		if _, dead := t.dead[key]; !dead {
			keys = append(keys, key)
		}
	}
	return keys
}

// judge fills the report's accounting from the payments' kinds, the
// ledger's keys and the dead letters.
func (r *Report) judge(k kinds, applied map[string]bool, t *tally) {
	r.Applied = len(applied)
	r.DeadLettered = t.copies
	r.Poisoned = len(t.dead)
	r.BrokerDropped = len(t.dropped)
	for key, reason := range t.dead {
		r.PoisonReasons[reason]++
		if i := paymentIndex(key); i >= 0 && k.healthy(i) {
			r.PoisonedPayable++
			r.HealthyDeadLettered = append(r.HealthyDeadLettered, key)
			if applied[key] {
				r.HealthyDeadLetteredApplied++
			}
		}
	}
	slices.Sort(r.HealthyDeadLettered)
	r.HealthyDeadLettered = r.HealthyDeadLettered[:min(len(r.HealthyDeadLettered), 20)]
	healthyApplied := 0
	for i := range k.messages {
		key := paymentKey(i)
		switch {
		case k.healthy(i) && applied[key]:
			healthyApplied++
		case k.unpayable(i):
			if _, ok := t.dead[key]; !ok {
				r.UnpayableNotDeadLettered++
			}
		}
	}
	r.Lost = k.healthyCount() - healthyApplied
	if k.poisonous < 0 {
		return
	}
	key := paymentKey(k.poisonous)
	p := &PoisonousFate{Key: key, Fate: "not settled"}
	dead, isDead := t.dead[key]
	dropped, isDropped := t.dropped[key]
	switch {
	case isDead:
		p.Fate, p.Reason = fateDeadLettered, dead
	case isDropped:
		p.Fate, p.Reason = "dropped by the broker", dropped
	case applied[key]:
		p.Fate = "applied"
	}
	r.Poisonous = p
}

// PrintReport writes r as a table, or as one JSON object.
func PrintReport(w io.Writer, r Report, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintln(w, string(b))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "broker\t%s\n", r.Broker)
	fmt.Fprintf(tw, "payments produced\t%d\n", r.Produced)
	fmt.Fprintf(tw, "duplicates injected (published twice)\t%d\n", r.DuplicatesInjected)
	fmt.Fprintf(tw, "payments applied\t%d\n", r.Applied)
	fmt.Fprintf(tw, "duplicate effects (applied twice)\t%d\n", r.DuplicateEffects)
	fmt.Fprintf(tw, "lost (healthy, never applied)\t%d\n", r.Lost)
	fmt.Fprintf(tw, "dead-lettered payments\t%d\n", r.Poisoned)
	reasons := make([]string, 0, len(r.PoisonReasons))
	for reason := range r.PoisonReasons {
		reasons = append(reasons, reason)
	}
	sort.Strings(reasons)
	for _, reason := range reasons {
		fmt.Fprintf(tw, "  %s\t%d\n", reason, r.PoisonReasons[reason])
	}
	fmt.Fprintf(tw, "  of them healthy (a failure)\t%d\n", r.PoisonedPayable)
	if r.PoisonedPayable > 0 {
		fmt.Fprintf(tw, "    applied before they were dead-lettered\t%d\n", r.HealthyDeadLetteredApplied)
		fmt.Fprintf(tw, "    the first of them\t%s\n", strings.Join(r.HealthyDeadLettered, " "))
	}
	fmt.Fprintf(tw, "unpayable payments not dead-lettered\t%d\n", r.UnpayableNotDeadLettered)
	if p := r.Poisonous; p != nil {
		fmt.Fprintf(tw, "the poisonous payment %s\t%s", p.Key, p.Fate)
		if p.Reason != "" {
			fmt.Fprintf(tw, " (%s)", p.Reason)
		}
		fmt.Fprintf(tw, "\n  consumers it crashed\t%d\n", p.Crashes)
		fmt.Fprintf(tw, "  handlers running beside it at each crash\t%v\n", p.Beside)
	}
	fmt.Fprintf(tw, "messages the broker gave up (no copy kept)\t%d\n", r.BrokerDropped)
	fmt.Fprintf(tw, "dead letters (copies included)\t%d\n", r.DeadLettered)
	fmt.Fprintf(tw, "consumers killed (kill -9)\t%d\n", r.ConsumerKills)
	fmt.Fprintf(tw, "consumers joined, left\t%d, %d\n", r.ConsumerJoins, r.ConsumerLeaves)
	fmt.Fprintf(tw, "consumers exited after a commit, before Complete\t%d\n", r.ExitsAfterCommit)
	fmt.Fprintf(tw, "grid nodes killed (kill -9) and restarted\t%d\n", r.GridNodeKills)
	if r.Unfinished != "" {
		fmt.Fprintf(tw, "unfinished\t%s\n", r.Unfinished)
	}
	fmt.Fprintf(tw, "seconds\t%.1f\n", r.Seconds)
	fmt.Fprintf(tw, "seed\t%d\n", r.Seed)
	verdict := "PASS: no payment applied twice, none lost, only the unpayable and the poisonous dead-lettered"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(tw, "verdict\t%s\n", verdict)
	tw.Flush()
}
