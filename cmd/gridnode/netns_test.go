package main

import (
	"errors"
	"testing"

	"github.com/l4xg/grid/internal/netlab"
)

// netLab is a netlab.Lab that lives for one test: it skips the test when
// network namespaces cannot be made here and fails it when a cut fails.
// Everything it creates is removed in Cleanup, after the processes
// started later (Cleanup runs last in, first out).
type netLab struct {
	tb  testing.TB
	lab *netlab.Lab
}

// newNetLab creates a netLab for n nodes, or skips tb when network
// namespaces cannot be made here.
func newNetLab(tb testing.TB, n int) *netLab {
	tb.Helper()
	lab, err := netlab.New(n)
	if errors.Is(err, netlab.ErrUnavailable) {
		tb.Skipf("isolation needs network namespaces: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := lab.Close(); err != nil {
			tb.Logf("cleanup: %v", err)
		}
	})
	return &netLab{tb: tb, lab: lab}
}

// nodeIP is node i's address.
func (l *netLab) nodeIP(i int) string { return l.lab.NodeIP(i) }

// wrap is the command prefix that runs a program in node i's namespace.
func (l *netLab) wrap(i int) []string { return l.lab.Wrap(i) }

// isolate cuts node i off from every other node and from the client.
func (l *netLab) isolate(i int) {
	l.tb.Helper()
	if err := l.lab.Isolate(i); err != nil {
		l.tb.Fatal(err)
	}
}

// reconnect undoes isolate.
func (l *netLab) reconnect(int) {
	l.tb.Helper()
	if err := l.lab.Heal(); err != nil {
		l.tb.Fatal(err)
	}
}
