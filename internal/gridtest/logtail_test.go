package gridtest

import (
	"fmt"
	"strings"
	"testing"
)

// TestLogTailKeepsTheLastLines: past its size the tail keeps the latest
// lines, oldest first.
func TestLogTailKeepsTheLastLines(t *testing.T) {
	l := newLogTail(3)
	if got := l.String(); got != "" {
		t.Fatalf("empty tail: %q", got)
	}
	for i := range 5 {
		fmt.Fprintf(l, "line %d\n", i)
	}
	if got, want := l.String(), "line 2\nline 3\nline 4\n"; got != want {
		t.Fatalf("tail %q, want %q", got, want)
	}
	if strings.Count(l.String(), "\n") != 3 {
		t.Fatal("more lines than the tail holds")
	}
}
