package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/testwait"
)

// testCrashLoop: one message crashes its consumer every time it runs,
// among healthy ones the consumer runs beside it. The first crash costs
// every message in flight an attempt (the grid cannot tell the culprit),
// but after it the messages taken over from the crashed holder run apart
// (client.Isolation), so the next crashes cost the culprit alone: at the
// client's default attempts the culprit ends POISONED and dead-lettered,
// and every healthy message is applied once: as its second attempt if it
// was in flight at the first crash, as its first if it ran before it (on a
// loaded machine the culprit may reach its handler late), never later.
//
// Each round is a consumer process: a consumer, on connections of its
// own, that "dies" (nothing reaches its broker or the grid again) once the
// culprit's handler has run for a while. In flight beside the culprit,
// a healthy handler stays in its handler until the crash, as a slow one
// would; one that sees no culprit running within a moment applies its
// message.
// ended reports whether every key is COMPLETED or POISONED.
func ended(t *testing.T, grid *client.Client, keys []string) bool {
	for _, k := range keys {
		g, err := grid.Get(context.Background(), Namespace, k)
		if err != nil {
			t.Fatalf("Get %s: %v", k, err)
		}
		if g.State != client.StateCompleted && g.State != client.StatePoisoned {
			return false
		}
	}
	return true
}

// errDied is what a handler of a crashed consumer returns; nothing it
// sends reaches the grid.
var errDied = errors.New("the consumer process died")

func testCrashLoop(t *testing.T, h Harness) {
	_, node := Grid(t)
	const lease = 2 * time.Second
	b := h.Open(t, time.Second)
	healthy := []string{"ok-1", "ok-2", "ok-3"}
	const culprit = "crash"
	for i, key := range append([]string{culprit}, healthy...) {
		b.Publish(t, Message{Key: key, Body: "pay", Lane: i % 2})
	}
	eff := NewEffects()
	// overlap is how long the culprit waits for the healthy messages to
	// be in their handlers beside it before it crashes its consumer, and
	// a healthy handler for the culprit to be in its handler beside it:
	// long enough for concurrent handlers to meet, short against the
	// lease.
	const overlap = 300 * time.Millisecond
	var culpritAttempts []int
	deaths := map[string]int{} // per healthy message: the crashes it was in flight for
	for round := 1; ; round++ {
		if round > client.DefaultMaxAttempts+2 {
			t.Fatalf("the culprit still runs after %d crashes (attempts %v)", round-1, culpritAttempts)
		}
		grid := Dial(t, node)
		var mu sync.Mutex
		inHandler := map[string]bool{}
		culpritIn := make(chan struct{})
		crashed := make(chan struct{})
		crash := make(chan int, 1)
		handler := func(ctx context.Context, _ string, l client.Lease) error {
			if l.Key == culprit {
				close(culpritIn)
				testwait.Holds(overlap, func() bool { // every healthy message in flight or applied
					mu.Lock()
					defer mu.Unlock()
					for _, k := range healthy {
						if eff.Get(k) == 0 && !inHandler[k] {
							return false
						}
					}
					return true
				})
				crash <- l.Attempt
				<-crashed
				return errDied
			}
			mu.Lock()
			inHandler[l.Key] = true
			mu.Unlock()
			select {
			case <-culpritIn: // in flight beside the culprit: dies with it
				<-crashed
				mu.Lock()
				deaths[l.Key]++
				mu.Unlock()
				return errDied
			case <-time.After(overlap):
			}
			eff.Add(ctx, l)
			return nil
		}
		consume, cut := b.Consumer(t, Config{Grid: grid, Lease: lease, InFlight: 4, Handler: handler})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- consume(ctx) }()
		dead := func() {
			cut()
			grid.Close()
			close(crashed)
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("a dead consumer's Consume did not return within 30s")
			}
		}
		var attempt int
		finished := false
		testwait.For(t, 60*time.Second, fmt.Sprintf("round %d: the culprit crashing its consumer, or every message settled", round), func() bool {
			select {
			case attempt = <-crash:
				return true
			default:
			}
			finished = ended(t, grid, append([]string{culprit}, healthy...)) && b.Pending(t) == 0
			return finished
		})
		if finished {
			close(crashed)
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Consume: %v", err)
			}
			cut()
			break
		}
		culpritAttempts = append(culpritAttempts, attempt)
		dead()
	}

	if want := client.DefaultMaxAttempts; len(culpritAttempts) != want {
		t.Errorf("the culprit crashed its consumer %d times (attempts %v), want %d: the client's default attempts", len(culpritAttempts), culpritAttempts, want)
	}
	ctx := context.Background()
	grid := Dial(t, node)
	if g, err := grid.Get(ctx, Namespace, culprit); err != nil || g.State != client.StatePoisoned {
		t.Errorf("the culprit: %+v, %v; want POISONED", g, err)
	}
	for _, k := range healthy {
		g, err := grid.Get(ctx, Namespace, k)
		// The grid cannot tell the culprit at the first crash, so a healthy
		// message in flight then loses that attempt; after it, the messages
		// taken over run apart and no crash costs a healthy one again.
		d := deaths[k]
		if err != nil || g.State != client.StateCompleted || d > 1 || g.Attempt != 1+d || eff.Get(k) != 1 {
			t.Errorf("%s: %+v, %v, applied %d times, in flight at %d crashes; want COMPLETED once, in flight at the first crash at most, as attempt 1 + that", k, g, err, eff.Get(k), d)
		}
	}
	dls := b.DeadLetters(t)
	if len(dls) != 1 || !strings.HasPrefix(dls[0].Reason, "poisoned") {
		t.Errorf("dead letters %+v, want the culprit's alone, poisoned", dls)
	}
}
