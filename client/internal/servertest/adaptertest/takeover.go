package adaptertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
)

// testCrashMidHandler: a consumer that dies in the middle of a handler
// (nothing reaches its broker or the grid again) leaves the key leased and
// the message unsettled. The broker gives the message to the next
// consumer, at once or once its redelivery period has passed; the grid
// answers BUSY while the lease runs, and then the next consumer takes the
// key over with a larger token and applies the message once.
func testCrashMidHandler(t *testing.T, h Harness) {
	grid, node := Grid(t)
	b := h.Open(t, time.Second)
	const lease = 2 * time.Second
	eff := NewEffects()

	// The first consumer, on connections of its own, hangs in the handler.
	gridA := Dial(t, node)
	entered := make(chan client.Lease, 1)
	consumeA, cutA := b.Consumer(t, Config{Grid: gridA, Lease: lease, InFlight: 1,
		Handler: func(ctx context.Context, _ string, l client.Lease) error {
			select {
			case entered <- l:
			default:
			}
			<-ctx.Done() // until its lease is lost: the process is gone
			return ctx.Err()
		}})
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	doneA := make(chan error, 1)
	go func() { doneA <- consumeA(ctxA) }()
	b.Publish(t, Message{Key: "payment-1", Body: "pay"})
	var first client.Lease
	select {
	case first = <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first consumer never ran the handler")
	}
	// "kill -9": nothing reaches the broker or the grid from the first
	// consumer again. Its Consume may see its connection go and say so;
	// either way it returns.
	cutA()
	gridA.Close()
	cancelA()
	select {
	case <-doneA:
	case <-time.After(30 * time.Second):
		t.Fatal("the dead consumer's Consume did not return within 30s")
	}

	reg := prometheus.NewRegistry()
	start(t, b, Config{Grid: grid, Lease: lease, Registerer: reg,
		Handler: func(ctx context.Context, _ string, l client.Lease) error { eff.Add(ctx, l); return nil }})
	testwait.For(t, 30*time.Second, "the payment applied by the second consumer", func() bool { return eff.Get("payment-1") == 1 })
	if second := eff.FirstToken("payment-1"); second <= first.Token {
		t.Fatalf("takeover token %d, want more than the crashed holder's %d", second, first.Token)
	}
	if got := Counted(t, reg, h.Name, adapter.Busy, adapter.Retry); h.CrashRedeliversAtOnce && got < 1 {
		t.Errorf("the redelivery while the lease ran was retried %v times, want at least once", got)
	}
	testwait.For(t, 20*time.Second, "the message settled", func() bool { return b.Pending(t) == 0 },
		func() string { return fmt.Sprintf("%d pending", b.Pending(t)) })
	if testwait.Holds(500*time.Millisecond, func() bool { return eff.Get("payment-1") > 1 }) {
		t.Fatalf("payment applied %d times", eff.Get("payment-1"))
	}
}

// testShutdown: a stopping consumer lets the handlers it started finish
// within its stop grace: each completes its key once, and the next
// consumer finds the messages DUPLICATE (Kafka commits none of them
// before it stops) or gone, and runs no handler again. Handlers that
// outrun the grace are cancelled; their effect may have been applied, so
// their keys are failed, never released: the messages come back at once
// (rather than after a redelivery period, but see
// Harness.StrayDeliveries) and the next consumer runs each as attempt 2.
func testShutdown(t *testing.T, h Harness) {
	grid, _ := Grid(t)
	const wait = 30 * time.Second
	redelivery := 2 * wait
	if h.StrayDeliveries {
		redelivery = 2 * time.Second
	}
	b := h.Open(t, redelivery)
	const msgs = 5
	for i := range msgs {
		b.Publish(t, Message{Key: fmt.Sprintf("fin-%d", i), Body: "pay", Lane: i % 2})
	}
	// Within the grace: the consumer is stopped while every handler runs,
	// and the handlers finish after that.
	effects := NewEffects()
	running := make(chan struct{}, msgs)
	finish := make(chan struct{})
	consume, cut := b.Consumer(t, Config{Grid: grid, InFlight: msgs, StopGrace: wait,
		Handler: func(ctx context.Context, _ string, l client.Lease) error {
			running <- struct{}{}
			<-finish
			if err := ctx.Err(); err != nil {
				return err // as a commit under the handler's context would
			}
			effects.Add(ctx, l)
			return nil
		}})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consume(ctx) }()
	waitRunning(t, running, msgs)
	stop()
	close(finish)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Consume after its context ended: %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Consume did not return after its handlers finished")
	}
	for i := range msgs {
		key := fmt.Sprintf("fin-%d", i)
		if g, err := grid.Get(context.Background(), Namespace, key); err != nil || g.State != client.StateCompleted || effects.Get(key) != 1 {
			t.Fatalf("%s after a stop its handler finished within the grace: %+v, %v, applied %d times; want COMPLETED once", key, g, err, effects.Get(key))
		}
	}
	cut()
	again := make(chan string, msgs)
	stopNext, cutNext := start(t, b, Config{Grid: grid, Handler: func(_ context.Context, _ string, l client.Lease) error {
		again <- l.Key
		return nil
	}})
	testwait.For(t, wait, "the finished messages settled", func() bool { return b.Pending(t) == 0 })
	select {
	case k := <-again:
		t.Fatalf("%s ran again after its handler finished within the stop grace", k)
	default:
	}
	if err := stopNext(); err != nil {
		t.Fatal(err)
	}
	cutNext()

	// Past the grace: the handlers are cancelled.
	for i := range msgs {
		b.Publish(t, Message{Key: fmt.Sprintf("m-%d", i), Body: "pay", Lane: i % 2})
	}
	consume, cut = b.Consumer(t, Config{Grid: grid, InFlight: msgs, StopGrace: 100 * time.Millisecond,
		Handler: func(ctx context.Context, _ string, _ client.Lease) error {
			running <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}})
	ctx, stop = context.WithCancel(context.Background())
	go func() { done <- consume(ctx) }()
	waitRunning(t, running, msgs)
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Consume after its context ended: %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Consume did not return after its stop grace")
	}
	for i := range msgs {
		key := fmt.Sprintf("m-%d", i)
		if g, err := grid.Get(context.Background(), Namespace, key); err != nil || g.State != client.StateFailed || g.Attempt != 1 {
			t.Fatalf("%s after its handler was cancelled past the grace: %+v, %v; want FAILED after attempt 1 (not released: its effect may have been applied)", key, g, err)
		}
	}
	if n := b.Pending(t); n < msgs {
		t.Fatalf("%d messages pending after shutdown, want all %d handed back", n, msgs)
	}
	cut() // a Kafka client leaves its group, which gives its partitions to the next consumer

	attempts := make(chan int, msgs)
	start(t, b, Config{Grid: grid, Handler: func(ctx context.Context, _ string, l client.Lease) error {
		attempts <- l.Attempt
		return nil
	}})
	for range msgs {
		select {
		case a := <-attempts:
			if a != 2 {
				t.Fatalf("a message whose handler was cancelled ran again as attempt %d, want 2", a)
			}
		case <-time.After(wait):
			t.Fatal("the handed-back messages did not come back")
		}
	}
	testwait.For(t, 20*time.Second, "every message settled", func() bool { return b.Pending(t) == 0 })
}

// waitRunning waits until n handlers have said they run.
func waitRunning(t *testing.T, running <-chan struct{}, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-running:
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of the %d handlers started", i, n)
		}
	}
}

// testLongHandler: a handler that runs for more than two of the broker's
// redelivery periods keeps its message (the adapter says it is still
// working on it): the broker does not deliver it again meanwhile, neither
// to its consumer nor to another one on the same queue (a consumer that
// receives again only once its deliveries are settled would not see it
// come back), so the grid is asked about it once, and it is acked once.
func testLongHandler(t *testing.T, h Harness) {
	grid, _ := Grid(t)
	const period = time.Second // SQS's visibility timeout is whole seconds
	b := h.Open(t, period)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	counted := func(o adapter.Outcome, a adapter.Action) float64 {
		var n float64
		for _, reg := range regs {
			n += Counted(t, reg, h.Name, o, a)
		}
		return n
	}
	runs := make(chan struct{}, 10)
	for _, reg := range regs {
		start(t, b, Config{Grid: grid, Lease: 5 * time.Second, Registerer: reg,
			Handler: func(ctx context.Context, _ string, _ client.Lease) error {
				runs <- struct{}{}
				select {
				case <-time.After(2*period + period/2): // the work
				case <-ctx.Done():
				}
				return ctx.Err()
			}})
	}
	b.Publish(t, Message{Key: "slow-1", Body: "slow"})
	testwait.For(t, 20*time.Second, "the message acked", func() bool {
		return counted(adapter.Completed, adapter.Ack) == 1 && b.Pending(t) == 0
	})
	if n := len(runs); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
	for _, o := range []adapter.Outcome{adapter.Busy, adapter.Error} {
		if got := counted(o, adapter.Retry); got != 0 {
			t.Errorf("messages %s/retry = %v: the message was delivered again while its handler ran", o, got)
		}
	}
	if got := counted(adapter.Duplicate, adapter.Ack); got != 0 {
		t.Errorf("messages duplicate/ack = %v: the message was delivered again", got)
	}
}
