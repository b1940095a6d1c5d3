package ledger

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// The bodies of the payments: an amount, or the body that crashes its
// consumer.
const (
	payableBody   = "100"
	unpayableBody = "-100"
	// poisonousBody makes the consumer process that handles the payment
	// exit abruptly from inside the handler, every time it is handled.
	poisonousBody = "crash"
)

// payment is one message the producer publishes.
type payment struct {
	key  string
	body string
}

// kinds says which payments of a run are unpayable (dead-lettered by
// their handler) and which one is poisonous (it crashes its consumer).
type kinds struct {
	messages    int
	poisonEvery int
	// poisonous is the index of the poisonous payment, -1 for none.
	poisonous int
}

func newKinds(cfg Config) kinds {
	k := kinds{messages: cfg.messages, poisonEvery: cfg.poisonEvery, poisonous: -1}
	if cfg.poisonous {
		// A third of the way in, so that the crash loop runs beside the
		// other faults; the first index from there that is not unpayable.
		for i := cfg.messages / 3; i < cfg.messages; i++ {
			if !k.unpayable(i) {
				k.poisonous = i
				break
			}
		}
	}
	return k
}

// unpayable reports whether payment i has an unpayable amount.
func (k kinds) unpayable(i int) bool { return k.poisonEvery > 0 && (i+1)%k.poisonEvery == 0 }

// unpayableCount is how many payments of the run are unpayable.
func (k kinds) unpayableCount() int {
	if k.poisonEvery <= 0 {
		return 0
	}
	return k.messages / k.poisonEvery
}

// healthy reports whether payment i is payable and not poisonous: it must
// be applied once, and never dead-lettered.
func (k kinds) healthy(i int) bool { return !k.unpayable(i) && i != k.poisonous }

// healthyCount is how many payments of the run are healthy.
func (k kinds) healthyCount() int {
	n := k.messages - k.unpayableCount()
	if k.poisonous >= 0 {
		n--
	}
	return n
}

// body is payment i's body.
func (k kinds) body(i int) string {
	switch {
	case i == k.poisonous:
		return poisonousBody
	case k.unpayable(i):
		return unpayableBody
	}
	return payableBody
}

// paymentKey is the i-th payment's key (its message id, idempotency key
// and ledger key).
func paymentKey(i int) string { return fmt.Sprintf("pay-%07d", i) }

// paymentIndex is the index of the payment with key, or -1.
func paymentIndex(key string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(key, "pay-"))
	if err != nil || !strings.HasPrefix(key, "pay-") {
		return -1
	}
	return i
}

// schedule is the order the producer publishes in: every payment once,
// in order, and a share (dupRatio) a second time at a random later point.
// It returns the payments and the number published twice.
func schedule(k kinds, dupRatio float64, rng *rand.Rand) ([]payment, int) {
	type slot struct {
		at float64 // the place in the order: i for payment i, after i for its copy
		i  int
	}
	order := make([]slot, 0, k.messages+int(float64(k.messages)*dupRatio)+1)
	for i := range k.messages {
		order = append(order, slot{float64(i), i})
		if rng.Float64() < dupRatio {
			order = append(order, slot{float64(i) + 0.5 + rng.Float64()*float64(k.messages-i), i})
		}
	}
	dups := len(order) - k.messages
	slices.SortStableFunc(order, func(a, b slot) int { return cmp.Compare(a.at, b.at) })
	ps := make([]payment, len(order))
	for n, s := range order {
		ps[n] = payment{key: paymentKey(s.i), body: k.body(s.i)}
	}
	return ps, dups
}
