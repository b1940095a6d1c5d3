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
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// grid starts a grid node and returns a client of it (and the node).
func grid(t *testing.T) (*client.Client, *gridtest.Node) {
	t.Helper()
	n := gridtest.Start(t)
	return dialGrid(t, n), n
}

func dialGrid(t *testing.T, n *gridtest.Node) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// effects counts what handlers did, per key.
type effects struct {
	mu     sync.Mutex
	n      map[string]int
	tokens map[string][]uint64
	corr   map[string]string
}

func newEffects() *effects {
	return &effects{n: map[string]int{}, tokens: map[string][]uint64{}, corr: map[string]string{}}
}

func (e *effects) add(ctx context.Context, key string, l client.Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[key]++
	e.tokens[key] = append(e.tokens[key], l.Token)
	e.corr[key] = client.CorrelationID(ctx)
}

func (e *effects) get(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[key]
}

// consume runs Consume until the test ends (or stop is called) and
// returns stop, which waits for Consume and returns its error.
func consume(t *testing.T, conn *amqp.Connection, c *client.Client, queue string, h Handler, opts ...Option) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Consume(ctx, conn, c, "test", queue, h, opts...) }()
	stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Consume did not return within 30s of its context ending")
		}
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Consume: %v", err)
		}
	})
	return stop
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
	c, _ := grid(t)
	eff := newEffects()
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
		eff.add(ctx, l.Key, l)
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
		return eff.get("flaky") == 1 && count(t, conn, q+".dlq") == 2 && eff.get("ok-19") == 1 &&
			testutil.ToFloat64(mustCounter(t, reg, "duplicate", adapter.Ack)) == 1
	}, func() string {
		return fmt.Sprintf("effects %v, dead letters %d", eff.n, count(t, conn, q+".dlq"))
	})
	for i := range 20 {
		if n := eff.get(fmt.Sprintf("ok-%d", i)); n != 1 {
			t.Errorf("ok-%d applied %d times", i, n)
		}
	}
	if eff.get("dup") != 1 || eff.get("by-header") != 1 {
		t.Errorf("dup applied %d times, by-header %d; want once each", eff.get("dup"), eff.get("by-header"))
	}
	if got := eff.corr["ok-3"]; got != "corr-ok-3" {
		t.Errorf("the handler's context carried correlation id %q, want corr-ok-3", got)
	}
	// The dead letters, and what the grid says about the poisoned key.
	if g, err := c.Get(context.Background(), "test", "poison"); err != nil || g.State != client.StatePoisoned {
		t.Errorf("poison key: %+v, %v; want POISONED", g, err)
	}
	m := func(outcome string, action adapter.Action) float64 {
		return testutil.ToFloat64(mustCounter(t, reg, outcome, action))
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

// mustCounter finds the adapter's counter for outcome and action in reg.
func mustCounter(t *testing.T, reg *prometheus.Registry, outcome string, action adapter.Action) prometheus.Counter {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "found"})
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["outcome"] == outcome && labels["action"] == string(action) && labels["adapter"] == "rabbitmq" {
				c.Add(m.GetCounter().GetValue())
			}
		}
	}
	return c
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
	c2, n := grid(t)
	eff := newEffects()

	// The first consumer, on connections of its own, hangs in the handler.
	connA, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	cA := dialGrid(t, n)
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
		eff.add(ctx, l.Key, l)
		return nil, nil
	}, WithRetryDelays(delays...), WithProcessOptions(lease), WithRegisterer(reg))
	testwait.For(t, 20*time.Second, "the payment applied by the second consumer", func() bool { return eff.get("payment-1") == 1 })
	eff.mu.Lock()
	second := eff.tokens["payment-1"][0]
	eff.mu.Unlock()
	if second <= first.Token {
		t.Fatalf("takeover token %d, want more than the crashed holder's %d", second, first.Token)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "busy", adapter.Retry)); got < 1 {
		t.Errorf("the redelivery while the lease ran was retried %v times, want at least once", got)
	}
	if testwait.Holds(500*time.Millisecond, func() bool { return eff.get("payment-1") > 1 }) {
		t.Fatalf("payment applied %d times", eff.get("payment-1"))
	}
}

// Stopping a consumer releases the keys its handlers hold and hands their
// messages back without counting an attempt: the next consumer runs each
// as attempt 1.
func TestShutdownHandsMessagesBack(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{time.Second}
	q := testQueue(t, conn, delays...)
	c, _ := grid(t)
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
	c, _ := grid(t)
	eff := newEffects()
	fingerprint := func(d amqp.Delivery) uint64 { return uint64(len(d.Body)) + 1 }
	entity := func(d amqp.Delivery) (string, uint64, bool) {
		v, ok := d.Headers["version"].(int32)
		return "account-7", uint64(v), ok
	}
	reg := prometheus.NewRegistry()
	consume(t, conn, c, q, func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		eff.add(ctx, l.Key, l)
		return nil, nil
	}, WithPrefetch(1), WithRetryDelays(delays...), WithFingerprint(fingerprint), WithEntity(entity), WithRegisterer(reg))

	publish(t, conn, q, "order-1", "ten euros", nil)
	testwait.For(t, 20*time.Second, "order-1 applied", func() bool { return eff.get("order-1") == 1 })
	publish(t, conn, q, "order-1", "one thousand euros", nil)
	testwait.For(t, 20*time.Second, "the reused key dead-lettered", func() bool { return count(t, conn, q+".dlq") == 1 })

	publish(t, conn, q, "balance-v2", "set", amqp.Table{"version": int32(2)})
	testwait.For(t, 20*time.Second, "version 2 applied", func() bool { return eff.get("balance-v2") == 1 })
	publish(t, conn, q, "balance-v1", "set", amqp.Table{"version": int32(1)})
	testwait.For(t, 20*time.Second, "version 1 settled as stale", func() bool {
		return testutil.ToFloat64(mustCounter(t, reg, "stale", adapter.Ack)) == 1
	})
	if eff.get("balance-v1") != 0 {
		t.Fatal("the stale version ran the handler")
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "mismatch", adapter.DeadLetter)); got != 1 {
		t.Fatalf("mismatches dead-lettered: %v, want 1", got)
	}
}

// WithDeadLetter sends dead letters to an exchange of the caller's, with
// the reason in a header, and a missing exchange is refused at the start.
func TestDeadLetterExchange(t *testing.T) {
	conn := dial(t)
	delays := []time.Duration{100 * time.Millisecond}
	q := testQueue(t, conn, delays...)
	c, _ := grid(t)
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
