package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

// entered runs g.enter in a goroutine and returns where its hold arrives.
func entered(g *Isolation, ctx context.Context, key string, redelivered bool) <-chan hold {
	got := make(chan hold, 1)
	go func() {
		h, err := g.enter(ctx, "ns", key, redelivered)
		if err != nil {
			h = holdNone
		}
		got <- h
	}()
	return got
}

// mustWait checks that nothing arrived on got (yet).
func mustWait[T any](t *testing.T, got <-chan T, what string) {
	t.Helper()
	select {
	case v := <-got:
		t.Fatalf("%s went ahead (%v), want it to wait", what, v)
	default:
	}
}

func arrives[T any](t *testing.T, got <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-got:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still waits", what)
		panic("unreachable")
	}
}

// requireIdle checks that g holds nothing, every hold given up.
func requireIdle(t *testing.T, g *Isolation) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shared != 0 || g.alone || g.reserving || g.waitingAlone != 0 {
		t.Fatalf("after every hold was given up: %+v", g)
	}
}

func enterNow(t *testing.T, g *Isolation, key string, redelivered bool, want hold) hold {
	t.Helper()
	h := arrives(t, entered(g, context.Background(), key, redelivered), "enter "+key)
	if h != want {
		t.Fatalf("enter %s: hold %d, want %d", key, h, want)
	}
	return h
}

// A takeover waits, holding its lease, for the handlers running beside it,
// and nothing enters while it waits or runs.
func TestIsolationTakeoverRunsAlone(t *testing.T) {
	g := NewIsolation()
	ctx := context.Background()
	a := g.granted(enterNow(t, g, "a", false, holdShared), "ns", "a", false)
	b := g.granted(enterNow(t, g, "b", false, holdShared), "ns", "b", false)
	x := g.granted(enterNow(t, g, "x", false, holdShared), "ns", "x", true)
	if x != holdUpgrading {
		t.Fatalf("a takeover's hold %d, want upgrading", x)
	}
	alone := make(chan hold, 1)
	go func() {
		h, err := g.runAlone(ctx)
		if err != nil {
			t.Error(err)
		}
		alone <- h
	}()
	late := entered(g, ctx, "c", false)
	g.leave(a)
	mustWait(t, alone, "the takeover, with b running,")
	g.leave(b)
	x = arrives(t, alone, "the takeover, nothing running,")
	mustWait(t, late, "a message arriving while a takeover waits or runs")
	g.leave(x)
	// The takeover put the consumer on probation: c is a suspect.
	if h := arrives(t, late, "c after the takeover"); h != holdReserving {
		t.Fatalf("c after a takeover: hold %d, want a suspect's", h)
	}
}

// Suspects reserve one at a time; a fresh lease lets the next one go and
// ends probation.
func TestIsolationSuspectsReserveOneAtATime(t *testing.T) {
	g := NewIsolation()
	ctx := context.Background()
	first := enterNow(t, g, "r1", true, holdReserving)
	second := entered(g, ctx, "r2", true)
	mustWait(t, second, "a second suspect, the first's Reserve in flight,")
	plain := enterNow(t, g, "p", false, holdShared) // not a suspect: no wait
	first = g.granted(first, "ns", "r1", false)
	if first != holdShared {
		t.Fatalf("a suspect granted a fresh lease: hold %d, want shared", first)
	}
	h := arrives(t, second, "the second suspect")
	g.refused(h, "ns", "r2", false)
	for _, h := range []hold{first, plain} {
		g.leave(h)
	}
	requireIdle(t, g)
}

// A key answered BUSY is a suspect from then on, until it is granted.
func TestIsolationBusyKeyIsASuspect(t *testing.T) {
	g := NewIsolation()
	g.refused(enterNow(t, g, "k", false, holdShared), "ns", "k", true)
	h := enterNow(t, g, "k", false, holdReserving)
	g.leave(g.granted(h, "ns", "k", false))
	enterNow(t, g, "k", false, holdShared)
}

// Probation makes every message a suspect until one is granted a fresh
// lease.
func TestIsolationProbation(t *testing.T) {
	g := NewIsolation()
	g.Probation()
	h := enterNow(t, g, "a", false, holdReserving)
	g.refused(h, "ns", "a", false) // a DUPLICATE: still on probation
	h = enterNow(t, g, "b", false, holdReserving)
	g.leave(g.granted(h, "ns", "b", false))
	enterNow(t, g, "c", false, holdShared)
}

// A wait ends with its context, and leaves nothing held.
func TestIsolationWaitEndsWithContext(t *testing.T) {
	g := NewIsolation()
	running := g.granted(enterNow(t, g, "a", false, holdShared), "ns", "a", false)
	x := g.granted(enterNow(t, g, "x", false, holdShared), "ns", "x", true)
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stopped")
	got := make(chan error, 1)
	go func() {
		_, err := g.runAlone(ctx)
		got <- err
	}()
	mustWait(t, got, "the takeover, a running beside it,")
	cancel(stop)
	if err := arrives(t, got, "the cancelled takeover"); !errors.Is(err, stop) {
		t.Fatalf("runAlone after its context ended: %v, want its cause", err)
	}
	_ = x // given up by runAlone
	g.leave(running)
	requireIdle(t, g)
}

// A nil Isolation holds nothing and never waits.
func TestIsolationNil(t *testing.T) {
	var g *Isolation
	h, err := g.enter(context.Background(), "ns", "k", true)
	if err != nil || h != holdNone {
		t.Fatalf("nil enter: %v, %v", h, err)
	}
	if h = g.granted(h, "ns", "k", true); h != holdNone {
		t.Fatalf("nil granted: %v", h)
	}
	g.refused(h, "ns", "k", true)
	g.leave(h)
}
