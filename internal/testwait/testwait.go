package testwait

import (
	"fmt"
	"testing"
	"time"
)

// Poll is the interval between two looks at a condition.
const Poll = 10 * time.Millisecond

// Holds polls cond until it holds or within has passed, and reports
// whether it came to hold. cond is called at least once.
func Holds(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Poll)
	}
	return true
}

// For polls cond until it holds and fails tb if it does not within,
// naming what it waited for and, given detail, detail's account of the
// state when it gave up.
func For(tb testing.TB, within time.Duration, what string, cond func() bool, detail ...func() string) {
	tb.Helper()
	if Holds(within, cond) {
		return
	}
	msg := fmt.Sprintf("not within %v: %s", within, what)
	if len(detail) > 0 {
		msg += ": " + detail[0]()
	}
	tb.Fatal(msg)
}

// Until polls why until it returns "" (it returns why the condition does
// not hold yet) and fails tb with its last answer if it does not within.
func Until(tb testing.TB, within time.Duration, why func() string) {
	tb.Helper()
	var last string
	if Holds(within, func() bool { last = why(); return last == "" }) {
		return
	}
	tb.Fatalf("not within %v: %s", within, last)
}
