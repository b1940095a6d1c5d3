package testwait

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// failTB records the failure of a wait instead of ending the test.
type failTB struct {
	testing.TB
	failed string
}

func (f *failTB) Helper() {}

func (f *failTB) Fatal(args ...any) { f.failed = fmt.Sprint(args...) }

func (f *failTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestHolds(t *testing.T) {
	n := 0
	if !Holds(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("a condition true at its third look: held after %d looks", n)
	}
	n = 0
	if Holds(0, func() bool { n++; return false }) || n != 1 {
		t.Fatalf("a false condition and no time: %d looks, want 1 and false", n)
	}
	if Holds(3*Poll, func() bool { return false }) {
		t.Fatal("a false condition held")
	}
}

func TestForNamesWhatAndDetail(t *testing.T) {
	tb := &failTB{}
	For(tb, 0, "a leader", func() bool { return false }, func() string { return "terms 3 and 4" })
	if !strings.Contains(tb.failed, "a leader: terms 3 and 4") {
		t.Fatalf("failure %q", tb.failed)
	}
	tb = &failTB{}
	For(tb, time.Second, "a leader", func() bool { return true })
	if tb.failed != "" {
		t.Fatalf("a holding condition failed: %q", tb.failed)
	}
}

func TestUntilGivesTheLastReason(t *testing.T) {
	tb := &failTB{}
	n := 0
	Until(tb, 3*Poll, func() string { n++; return fmt.Sprintf("look %d", n) })
	if want := fmt.Sprintf("look %d", n); !strings.HasSuffix(tb.failed, want) {
		t.Fatalf("failure %q, want it to end with %q", tb.failed, want)
	}
	tb = &failTB{}
	n = 0
	Until(tb, time.Second, func() string {
		if n++; n < 2 {
			return "not yet"
		}
		return ""
	})
	if tb.failed != "" || n != 2 {
		t.Fatalf("failure %q after %d looks", tb.failed, n)
	}
}
