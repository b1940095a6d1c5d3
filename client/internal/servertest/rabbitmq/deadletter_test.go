package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	"github.com/l4xg/grid/client/rabbitmq"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
)

// bareQueue declares a fresh queue with no dead-letter exchange, as the
// package example's "payments" is, and deletes it, its dead-letter queue,
// its retry queues and extra when the test ends.
func bareQueue(t *testing.T, conn *amqp.Connection, delays []time.Duration, extra ...string) string {
	t.Helper()
	q := fmt.Sprintf("grid-test-%s-%x", t.Name(), rand.Uint32())
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := amqp.Dial(amqpURL())
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		names := append([]string{q, rabbitmq.DeadLetterQueue(q)}, extra...)
		for _, d := range delays {
			names = append(names, rabbitmq.RetryQueue(q, d))
		}
		for _, name := range names {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
	})
	return q
}

// take removes and returns every message queue holds. A queue that does
// not exist fails the test.
func take(t *testing.T, conn *amqp.Connection, queue string) []amqp.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var got []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return got
		}
		got = append(got, d)
	}
}

// warnings records the warnings logged through it.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, b.String())
	return nil
}

// matching is how many warnings contain every one of subs.
func (w *warnings) matching(subs ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
next:
	for _, m := range w.msgs {
		for _, s := range subs {
			if !strings.Contains(m, s) {
				continue next
			}
		}
		n++
	}
	return n
}

func (w *warnings) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.msgs, "\n")
}

// The consumer of docs/adapters.md: a queue declared without a dead-letter
// exchange and no WithDeadLetter. A poisoned message, a reused key (MISMATCH)
// and a message without a key are kept in "<queue>.dlq", which Consume
// declared, each saying why; none is dropped.
func TestDeadLettersKeptByDefault(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{100 * time.Millisecond}
	q := bareQueue(t, conn, delays)
	c, _ := adaptertest.Grid(t)
	reg := prometheus.NewRegistry()
	fingerprint := func(d amqp.Delivery) uint64 { return uint64(len(d.Body)) + 1 }
	consume(t, conn, c, q, func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		if string(d.Body) == "poison" {
			return nil, client.Poison(errors.New("unparseable payment"))
		}
		return nil, nil
	}, rabbitmq.WithPrefetch(1), rabbitmq.WithRetryDelays(delays...), rabbitmq.WithFingerprint(fingerprint), rabbitmq.WithRegisterer(reg))

	publish(t, conn, q, "order-1", "ten euros", nil)
	testwait.For(t, 20*time.Second, "order-1 completed", func() bool {
		return adaptertest.Counted(t, reg, "rabbitmq", adapter.Completed, adapter.Ack) == 1
	})
	publish(t, conn, q, "order-1", "one thousand euros", nil)
	publish(t, conn, q, "bad-1", "poison", nil)
	publish(t, conn, q, "", "no key", nil)
	testwait.For(t, 20*time.Second, "three messages dead-lettered", func() bool {
		return adaptertest.Counted(t, reg, "rabbitmq", adapter.Mismatch, adapter.DeadLetter)+
			adaptertest.Counted(t, reg, "rabbitmq", adapter.Poisoned, adapter.DeadLetter)+
			adaptertest.Counted(t, reg, "rabbitmq", adapter.NoKey, adapter.DeadLetter) == 3
	})
	got := map[string]string{}
	for _, d := range take(t, conn, rabbitmq.DeadLetterQueue(q)) {
		reason, _ := d.Headers["x-grid-reason"].(string)
		got[string(d.Body)] = reason
	}
	for body, outcome := range map[string]adapter.Outcome{
		"one thousand euros": adapter.Mismatch, "poison": adapter.Poisoned, "no key": adapter.NoKey,
	} {
		if reason, ok := got[body]; !ok || !strings.HasPrefix(reason, string(outcome)) {
			t.Errorf("dead letter %q: kept %v, reason %q; want kept, saying %s", body, ok, reason, outcome)
		}
	}
	if len(got) != 3 {
		t.Errorf("%d dead letters in %s, want 3: %v", len(got), rabbitmq.DeadLetterQueue(q), got)
	}
	if n := count(t, conn, q); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}

// With WithoutDeclare the dead-letter queue is the operator's: Consume
// refuses to start without it, as it does without a retry queue. And one
// the operator declared with arguments of their own is used as it is.
func TestDeadLetterQueueChecked(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{time.Second}
	q := bareQueue(t, conn, delays)
	c, _ := adaptertest.Grid(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(rabbitmq.RetryQueue(q, time.Second), true, false, false, false, amqp.Table{
		"x-message-ttl": int64(1000), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q,
	}); err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, amqp.Delivery, client.Lease) ([]byte, error) { return nil, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = rabbitmq.Consume(ctx, conn, c, "test", q, h, rabbitmq.WithRetryDelays(delays...), rabbitmq.WithoutDeclare())
	if err == nil || !strings.Contains(err.Error(), rabbitmq.DeadLetterQueue(q)) {
		t.Fatalf("Consume without declaring, and no %s: %v; want refused, naming it", rabbitmq.DeadLetterQueue(q), err)
	}
	// An operator's dead-letter queue, not durable and length-limited:
	// declaring it as the adapter would is refused by the broker.
	if _, err := ch.QueueDeclare(rabbitmq.DeadLetterQueue(q), false, false, false, false, amqp.Table{"x-max-length": int64(1000)}); err != nil {
		t.Fatal(err)
	}
	stop := consume(t, conn, c, q, h, rabbitmq.WithRetryDelays(delays...))
	if err := stop(); err != nil {
		t.Fatalf("Consume with the operator's dead-letter queue: %v", err)
	}
}

// WithNackDeadLetter leaves dead letters to the queue's own dead-letter
// exchange, and warns of each: RabbitMQ drops the message when the queue
// has none.
func TestNackDeadLetterWarns(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{100 * time.Millisecond}
	q := testQueue(t, conn, delays...) // its dead-letter exchange routes to <q>.dlq
	c, _ := adaptertest.Grid(t)
	h := func(context.Context, amqp.Delivery, client.Lease) ([]byte, error) {
		return nil, client.Poison(errors.New("bad amount"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rabbitmq.Consume(ctx, conn, c, "test", q, h, rabbitmq.WithNackDeadLetter(), rabbitmq.WithDeadLetter("", "x")); err == nil {
		t.Fatal("Consume with WithNackDeadLetter and WithDeadLetter started")
	}
	w := &warnings{}
	consume(t, conn, c, q, h, rabbitmq.WithRetryDelays(delays...), rabbitmq.WithNackDeadLetter(), rabbitmq.WithLogger(slog.New(w)))
	publish(t, conn, q, "bad-1", "x", nil)
	publish(t, conn, q, "bad-2", "x", nil)
	testwait.For(t, 20*time.Second, "both dead-lettered by the queue", func() bool { return count(t, conn, q+".dlq") == 2 })
	testwait.For(t, 20*time.Second, "a warning per nack", func() bool {
		return w.matching("Nack(requeue=false)", "bad-1") == 1 && w.matching("Nack(requeue=false)", "bad-2") == 1
	}, w.String)
	if got := take(t, conn, q+".dlq"); len(got) != 2 || got[0].Headers["x-grid-reason"] != nil {
		t.Fatalf("dead letters %v; want the two originals, nacked, not copies", got)
	}
}

// A retry queue deleted after Consume started: the copies published to it
// come back (mandatory), so their originals are not acked but handed back,
// and come through once the grid's retry-after has passed. At the same
// time, in the same prefetch window, copies to the retry queue that still
// exists are confirmed and their originals acked: each return is matched
// to its own publish.
func TestReturnedRetryCopyIsNotLost(t *testing.T) {
	conn := dial(t)
	short, gone := 100*time.Millisecond, 300*time.Millisecond
	delays := []time.Duration{short, gone}
	q := bareQueue(t, conn, delays)
	c, _ := adaptertest.Grid(t)
	eff := adaptertest.NewEffects()
	reg := prometheus.NewRegistry()
	w := &warnings{}
	var failedOnce sync.Map
	const n = 16
	consume(t, conn, c, q, func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		if _, again := failedOnce.LoadOrStore(l.Key, true); !again && string(d.Body) != "warm-up" {
			// "a-*" wait 50ms: the short queue; "b-*" 400ms: the
			// deleted one (the longest, which takes every longer delay).
			wait := 50 * time.Millisecond
			if strings.HasPrefix(l.Key, "b-") {
				wait = 400 * time.Millisecond
			}
			return nil, client.RetryAfter(errors.New("ledger busy"), wait)
		}
		eff.Add(ctx, l)
		return nil, nil
	}, rabbitmq.WithPrefetch(2*n), rabbitmq.WithRetryDelays(delays...), rabbitmq.WithErrorDelay(20*time.Millisecond),
		rabbitmq.WithBusyDelay(time.Second), rabbitmq.WithRegisterer(reg), rabbitmq.WithLogger(slog.New(w)))
	// Consume has declared the retry queues once a message went through.
	publish(t, conn, q, "warm-up", "warm-up", nil)
	testwait.For(t, 20*time.Second, "the warm-up message", func() bool { return eff.Get("warm-up") == 1 })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(rabbitmq.RetryQueue(q, gone), false, false, false); err != nil {
		t.Fatal(err)
	}

	for i := range n {
		publish(t, conn, q, fmt.Sprintf("a-%d", i), "pay", nil)
		publish(t, conn, q, fmt.Sprintf("b-%d", i), "pay", nil)
	}
	testwait.For(t, 30*time.Second, "every payment applied", func() bool {
		for i := range n {
			if eff.Get(fmt.Sprintf("a-%d", i)) == 0 || eff.Get(fmt.Sprintf("b-%d", i)) == 0 {
				return false
			}
		}
		return true
	}, eff.String)
	for i := range n {
		for _, k := range []string{fmt.Sprintf("a-%d", i), fmt.Sprintf("b-%d", i)} {
			if got := eff.Get(k); got != 1 {
				t.Errorf("%s applied %d times", k, got)
			}
		}
	}
	// Every "a" failure was retried through the short queue, every "b"
	// failure handed back: a return taken for another publish's would
	// move a count from one to the other.
	if got := adaptertest.Counted(t, reg, "rabbitmq", adapter.Failed, adapter.Retry); got != n {
		t.Errorf("failures whose copy was taken: %v, want %d", got, n)
	}
	if got := adaptertest.Counted(t, reg, "rabbitmq", adapter.Failed, adapter.Requeue); got != n {
		t.Errorf("failures handed back: %v, want %d", got, n)
	}
	if got := w.matching("handed back", rabbitmq.RetryQueue(q, gone)); got < n {
		t.Errorf("%d warnings of a copy returned from %s, want at least %d:\n%s", got, rabbitmq.RetryQueue(q, gone), n, w)
	}
}

// A dead letter to a queue that does not exist comes back: the message is
// not acked but handed back, again and again, and reaches the queue once
// it exists.
func TestReturnedDeadLetterWaitsForItsQueue(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{time.Second}
	later := fmt.Sprintf("grid-test-later-%x", rand.Uint32())
	q := bareQueue(t, conn, delays, later)
	c, _ := adaptertest.Grid(t)
	reg := prometheus.NewRegistry()
	consume(t, conn, c, q, func(context.Context, amqp.Delivery, client.Lease) ([]byte, error) {
		return nil, client.Poison(errors.New("bad amount"))
	}, rabbitmq.WithRetryDelays(delays...), rabbitmq.WithDeadLetter("", later), rabbitmq.WithErrorDelay(20*time.Millisecond),
		rabbitmq.WithRegisterer(reg), rabbitmq.WithLogger(slog.New(&warnings{})))
	publish(t, conn, q, "bad-1", "x", nil)
	testwait.For(t, 20*time.Second, "the dead letter handed back twice", func() bool {
		return adaptertest.Counted(t, reg, "rabbitmq", adapter.Poisoned, adapter.Requeue) >= 2
	}, func() string {
		return fmt.Sprintf("dead-lettered %v", adaptertest.Counted(t, reg, "rabbitmq", adapter.Poisoned, adapter.DeadLetter))
	})
	if got := adaptertest.Counted(t, reg, "rabbitmq", adapter.Poisoned, adapter.DeadLetter); got != 0 {
		t.Fatalf("dead letters counted as sent to a queue that does not exist: %v", got)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(later, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "the dead letter in its queue", func() bool { return count(t, conn, later) == 1 })
	testwait.For(t, 20*time.Second, "the original acked", func() bool {
		return adaptertest.Counted(t, reg, "rabbitmq", adapter.Poisoned, adapter.DeadLetter) == 1
	})
	if n := count(t, conn, q); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}
