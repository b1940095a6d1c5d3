package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/adaptertest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
)

// These tests run against the RabbitMQ server on 127.0.0.1:5672
// (guest/guest, or GRID_TEST_AMQP_URL). Without one they are skipped,
// unless GRID_TEST_BROKERS=required (as .ci/run sets it): then they fail.

func amqpURL() string {
	if u := os.Getenv("GRID_TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// dial connects to the broker, closing the connection when the test ends.
func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		if os.Getenv("GRID_TEST_BROKERS") == "required" {
			t.Fatalf("RabbitMQ at %s: %v", amqpURL(), err)
		}
		t.Skipf("no RabbitMQ at %s (%v); GRID_TEST_BROKERS=required makes this a failure", amqpURL(), err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// testQueue declares a fresh queue whose dead letters go to "<queue>.dlq",
// and deletes both, and the retry queues, when the test ends.
func testQueue(t *testing.T, conn *amqp.Connection, delays ...time.Duration) string {
	t.Helper()
	q := fmt.Sprintf("grid-test-%s-%x", t.Name(), rand.Uint32())
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(q+".dlq", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, false, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q + ".dlq",
	}); err != nil {
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
		for _, name := range []string{q, q + ".dlq"} {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
		for _, d := range delays {
			_, _ = ch.QueueDelete(RetryQueue(q, d), false, false, false)
		}
	})
	return q
}

// publish sends a message with id (none if "") and headers to queue.
func publish(t *testing.T, conn *amqp.Connection, queue, id, body string, headers amqp.Table) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{
		MessageId: id, Headers: headers, Body: []byte(body), CorrelationId: "corr-" + id,
	}); err != nil {
		t.Fatal(err)
	}
}

// count is how many messages queue holds.
func count(t *testing.T, conn *amqp.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// consume runs Consume until the test ends (or stop is called) and
// returns stop, which waits for Consume and returns its error.
func consume(t *testing.T, conn *amqp.Connection, c *client.Client, queue string, h Handler, opts ...Option) (stop func() error) {
	t.Helper()
	return adaptertest.Run(t, func(ctx context.Context) error { return Consume(ctx, conn, c, "test", queue, h, opts...) })
}

// Every outcome row at once, in one prefetch window, so the client batches
// the Reserves of messages with different fates: completed, a duplicate,
// a retryable failure that comes back through a retry queue and then
// succeeds, a poisoned message and one without a key (dead-lettered), each
// acted on as the package documents, and counted in the metrics.
func TestOutcomes(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{100 * time.Millisecond, time.Second}
	q := testQueue(t, conn, delays...)
	c, _ := adaptertest.Grid(t)
	eff := adaptertest.NewEffects()
	var flaky sync.Once
	h := func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		switch string(d.Body) {
		case "poison":
			return nil, client.Poison(errors.New("unparseable payment"))
		case "flaky":
			failed := false
			flaky.Do(func() { failed = true })
			if failed {
				return nil, client.RetryAfter(errors.New("ledger busy"), 50*time.Millisecond)
			}
		}
		eff.Add(ctx, l)
		return []byte("done " + l.Key), nil
	}
	for i := range 20 {
		publish(t, conn, q, fmt.Sprintf("ok-%d", i), "ok", nil)
	}
	publish(t, conn, q, "dup", "ok", nil)
	publish(t, conn, q, "dup", "ok", nil)
	publish(t, conn, q, "", "ok", amqp.Table{KeyHeader: "by-header"})
	publish(t, conn, q, "flaky", "flaky", nil)
	publish(t, conn, q, "poison", "poison", nil)
	publish(t, conn, q, "", "no key", nil)

	reg := prometheus.NewRegistry()
	consume(t, conn, c, q, h, WithPrefetch(64), WithRetryDelays(delays...), WithRegisterer(reg))
	// The second copy of "dup" is a DUPLICATE, or BUSY while the first one
	// runs and a DUPLICATE when it comes back from the retry queue.
	testwait.For(t, 20*time.Second, "every message settled", func() bool {
		return eff.Get("flaky") == 1 && count(t, conn, q+".dlq") == 2 && eff.Get("ok-19") == 1 &&
			adaptertest.Counted(t, reg, "rabbitmq", "duplicate", adapter.Ack) == 1
	}, func() string {
		return fmt.Sprintf("effects %v, dead letters %d", eff, count(t, conn, q+".dlq"))
	})
	for i := range 20 {
		if n := eff.Get(fmt.Sprintf("ok-%d", i)); n != 1 {
			t.Errorf("ok-%d applied %d times", i, n)
		}
	}
	if eff.Get("dup") != 1 || eff.Get("by-header") != 1 {
		t.Errorf("dup applied %d times, by-header %d; want once each", eff.Get("dup"), eff.Get("by-header"))
	}
	if got := eff.Correlation("ok-3"); got != "corr-ok-3" {
		t.Errorf("the handler's context carried correlation id %q, want corr-ok-3", got)
	}
	// The dead letters, and what the grid says about the poisoned key.
	if g, err := c.Get(context.Background(), "test", "poison"); err != nil || g.State != client.StatePoisoned {
		t.Errorf("poison key: %+v, %v; want POISONED", g, err)
	}
	m := func(outcome string, action adapter.Action) float64 {
		return adaptertest.Counted(t, reg, "rabbitmq", adapter.Outcome(outcome), action)
	}
	for _, want := range []struct {
		outcome string
		action  adapter.Action
		n       float64
	}{
		{"completed", adapter.Ack, 23}, {"duplicate", adapter.Ack, 1}, {"failed", adapter.Retry, 1},
		{"mismatch", adapter.DeadLetter, 0}, {"error", adapter.Retry, 0},
		{"poisoned", adapter.DeadLetter, 1}, {"no_key", adapter.DeadLetter, 1},
	} {
		if got := m(want.outcome, want.action); got != want.n {
			t.Errorf("messages %s/%s = %v, want %v", want.outcome, want.action, got, want.n)
		}
	}
	if n := count(t, conn, q); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}

// A consumer that dies in the middle of a handler (its grid client and its
// connection gone, the handler never returning) leaves the key leased.
// RabbitMQ redelivers the message to another consumer at once; the grid
// answers BUSY, so it waits in a retry queue until the lease has lapsed,
// and then the second consumer takes the key over with a larger token and
// applies the payment once.
func TestCrashMidHandlerIsTakenOver(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{200 * time.Millisecond, time.Second, 2 * time.Second}
	q := testQueue(t, conn, delays...)
	c2, n := adaptertest.Grid(t)
	eff := adaptertest.NewEffects()

	// The first consumer, on connections of its own, hangs in the handler.
	connA, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	cA := adaptertest.Dial(t, n)
	entered := make(chan client.Lease, 1)
	hang := func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		entered <- l
		<-ctx.Done() // until its lease is lost: the process is gone
		return nil, ctx.Err()
	}
	lease := client.WithLease(time.Second)
	stopA := consume(t, connA, cA, q, hang, WithRetryDelays(delays...), WithProcessOptions(lease), WithPrefetch(1))
	publish(t, conn, q, "payment-1", "pay", nil)
	var first client.Lease
	select {
	case first = <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first consumer never ran the handler")
	}
	// "kill -9": the grid client stops extending, the broker connection
	// drops with the delivery unacked.
	cA.Close()
	connA.Close()
	_ = stopA()

	reg := prometheus.NewRegistry()
	consume(t, conn, c2, q, func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		eff.Add(ctx, l)
		return nil, nil
	}, WithRetryDelays(delays...), WithProcessOptions(lease), WithRegisterer(reg))
	testwait.For(t, 20*time.Second, "the payment applied by the second consumer", func() bool { return eff.Get("payment-1") == 1 })
	second := eff.FirstToken("payment-1")
	if second <= first.Token {
		t.Fatalf("takeover token %d, want more than the crashed holder's %d", second, first.Token)
	}
	if got := adaptertest.Counted(t, reg, "rabbitmq", "busy", adapter.Retry); got < 1 {
		t.Errorf("the redelivery while the lease ran was retried %v times, want at least once", got)
	}
	if testwait.Holds(500*time.Millisecond, func() bool { return eff.Get("payment-1") > 1 }) {
		t.Fatalf("payment applied %d times", eff.Get("payment-1"))
	}
}

// Stopping a consumer releases the keys its handlers hold and hands their
// messages back without counting an attempt: the next consumer runs each
// as attempt 1.
func TestShutdownHandsMessagesBack(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{time.Second}
	q := testQueue(t, conn, delays...)
	c, _ := adaptertest.Grid(t)
	const msgs = 5
	for i := range msgs {
		publish(t, conn, q, fmt.Sprintf("m-%d", i), "pay", nil)
	}
	var running sync.WaitGroup
	running.Add(msgs)
	stop := consume(t, conn, c, q, func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		running.Done()
		<-ctx.Done()
		return nil, ctx.Err()
	}, WithPrefetch(msgs), WithRetryDelays(delays...))
	running.Wait()
	if err := stop(); err != nil {
		t.Fatalf("Consume after its context ended: %v, want nil", err)
	}
	for i := range msgs {
		key := fmt.Sprintf("m-%d", i)
		g, err := c.Get(context.Background(), "test", key)
		if err != nil || g.State == client.StateProcessing {
			t.Fatalf("%s after shutdown: %+v, %v; want it released", key, g, err)
		}
	}
	attempts := make(chan int, msgs)
	consume(t, conn, c, q, func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		attempts <- l.Attempt
		return nil, nil
	}, WithRetryDelays(delays...))
	for range msgs {
		select {
		case a := <-attempts:
			if a != 1 {
				t.Fatalf("a handed-back message ran as attempt %d, want 1", a)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the handed-back messages did not come back")
		}
	}
}

// MISMATCH (a key reused for another payload) dead-letters the message;
// STALE (an older version of an entity than one already applied) acks it
// without running the handler.
func TestMismatchAndStale(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{100 * time.Millisecond}
	q := testQueue(t, conn, delays...)
	c, _ := adaptertest.Grid(t)
	eff := adaptertest.NewEffects()
	fingerprint := func(d amqp.Delivery) uint64 { return uint64(len(d.Body)) + 1 }
	entity := func(d amqp.Delivery) (string, uint64, bool) {
		v, ok := d.Headers["version"].(int32)
		return "account-7", uint64(v), ok
	}
	reg := prometheus.NewRegistry()
	consume(t, conn, c, q, func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		eff.Add(ctx, l)
		return nil, nil
	}, WithPrefetch(1), WithRetryDelays(delays...), WithFingerprint(fingerprint), WithEntity(entity), WithRegisterer(reg))

	publish(t, conn, q, "order-1", "ten euros", nil)
	testwait.For(t, 20*time.Second, "order-1 applied", func() bool { return eff.Get("order-1") == 1 })
	publish(t, conn, q, "order-1", "one thousand euros", nil)
	testwait.For(t, 20*time.Second, "the reused key dead-lettered", func() bool { return count(t, conn, q+".dlq") == 1 })

	publish(t, conn, q, "balance-v2", "set", amqp.Table{"version": int32(2)})
	testwait.For(t, 20*time.Second, "version 2 applied", func() bool { return eff.Get("balance-v2") == 1 })
	publish(t, conn, q, "balance-v1", "set", amqp.Table{"version": int32(1)})
	testwait.For(t, 20*time.Second, "version 1 settled as stale", func() bool {
		return adaptertest.Counted(t, reg, "rabbitmq", "stale", adapter.Ack) == 1
	})
	if eff.Get("balance-v1") != 0 {
		t.Fatal("the stale version ran the handler")
	}
	if got := adaptertest.Counted(t, reg, "rabbitmq", "mismatch", adapter.DeadLetter); got != 1 {
		t.Fatalf("mismatches dead-lettered: %v, want 1", got)
	}
}

// WithDeadLetter sends dead letters to an exchange of the caller's, with
// the reason in a header, and a missing exchange is refused at the start.
func TestDeadLetterExchange(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{100 * time.Millisecond}
	q := testQueue(t, conn, delays...)
	c, _ := adaptertest.Grid(t)
	ctx := context.Background()
	if err := Consume(ctx, conn, c, "test", q, func(context.Context, amqp.Delivery, client.Lease) ([]byte, error) { return nil, nil },
		WithDeadLetter("no-such-exchange-"+q, "x")); err == nil {
		t.Fatal("Consume with a missing dead-letter exchange started")
	}
	consume(t, conn, c, q, func(context.Context, amqp.Delivery, client.Lease) ([]byte, error) {
		return nil, client.Poison(errors.New("bad amount"))
	}, WithRetryDelays(delays...), WithDeadLetter("", q+".dlq"))
	publish(t, conn, q, "bad-1", "x", nil)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var got amqp.Delivery
	testwait.For(t, 20*time.Second, "the dead letter", func() bool {
		d, ok, err := ch.Get(q+".dlq", true)
		if err != nil {
			t.Fatal(err)
		}
		got = d
		return ok
	})
	reason, _ := got.Headers["x-grid-reason"].(string)
	if got.MessageId != "bad-1" || !strings.Contains(reason, "bad amount") {
		t.Fatalf("dead letter %q with reason %q, want bad-1 saying why", got.MessageId, reason)
	}
}
