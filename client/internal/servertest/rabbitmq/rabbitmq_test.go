package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
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
			_, _ = ch.QueueDelete(rabbitmq.RetryQueue(q, d), false, false, false)
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
func consume(t *testing.T, conn *amqp.Connection, c *client.Client, queue string, h rabbitmq.Handler, opts ...rabbitmq.Option) (stop func() error) {
	t.Helper()
	return adaptertest.Start(t, func(ctx context.Context) error { return rabbitmq.Consume(ctx, conn, c, "test", queue, h, opts...) })
}

// harness runs the conformance suite on a queue of its own per scenario,
// whose dead letters the adapter copies to "<queue>.dlq".
var harness = adaptertest.Harness{
	Name:                  "rabbitmq",
	Open:                  func(t *testing.T, _ time.Duration) adaptertest.Broker { return open(t) },
	CrashRedeliversAtOnce: true,
}

func TestConformance(t *testing.T) { adaptertest.Run(t, harness) }

// broker is a queue of the test's own on the broker.
type broker struct {
	conn  *amqp.Connection // the test's: publishes and counts
	queue string
}

// retryDelays are the suite's consumers' retry queues.
var retryDelays = []time.Duration{100 * time.Millisecond, time.Second}

func open(t *testing.T) *broker {
	conn := dial(t)
	return &broker{conn: conn, queue: testQueue(t, conn, retryDelays...)}
}

// Publish sends m with its key as the message id, or in the
// idempotency-key header with KeyElsewhere (under another message id).
func (b *broker) Publish(t *testing.T, m adaptertest.Message) {
	t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	p := amqp.Publishing{MessageId: m.Key, CorrelationId: m.Correlation, Body: []byte(m.Body), Headers: amqp.Table{}}
	if m.KeyElsewhere {
		p.MessageId, p.Headers[rabbitmq.KeyHeader] = "id-of-"+m.Key, m.Key
	}
	if m.Version != 0 {
		p.Headers["version"] = int32(m.Version)
	}
	if err := ch.PublishWithContext(context.Background(), "", b.queue, false, false, p); err != nil {
		t.Fatal(err)
	}
}

// Consumer is Consume on a connection of its own, which cut closes.
func (b *broker) Consumer(t *testing.T, cfg adaptertest.Config) (func(context.Context) error, func()) {
	t.Helper()
	conn := dial(t)
	opts := []rabbitmq.Option{rabbitmq.WithRetryDelays(retryDelays...),
		rabbitmq.WithFingerprint(func(d amqp.Delivery) uint64 { return adaptertest.Fingerprint(d.Body) }),
		rabbitmq.WithEntity(func(d amqp.Delivery) (string, uint64, bool) {
			v, ok := d.Headers["version"].(int32)
			return adaptertest.Entity, uint64(v), ok
		})}
	if cfg.Lease > 0 {
		opts = append(opts, rabbitmq.WithProcessOptions(client.WithLease(cfg.Lease)))
	}
	if cfg.InFlight > 0 {
		opts = append(opts, rabbitmq.WithPrefetch(cfg.InFlight))
	}
	opts = append(opts, rabbitmq.WithStopGrace(cfg.StopGrace))
	if cfg.Registerer != nil {
		opts = append(opts, rabbitmq.WithRegisterer(cfg.Registerer))
	}
	h := func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		return nil, cfg.Handler(ctx, string(d.Body), l)
	}
	return func(ctx context.Context) error {
		return rabbitmq.Consume(ctx, conn, cfg.Grid, adaptertest.Namespace, b.queue, h, opts...)
	}, func() { conn.Close() }
}

// Pending is how many messages the queue and its retry queues hold ready:
// AMQP does not tell how many are delivered and unacked.
func (b *broker) Pending(t *testing.T) int {
	t.Helper()
	n := count(t, b.conn, b.queue)
	for _, d := range retryDelays {
		n += countIfDeclared(t, b.conn, rabbitmq.RetryQueue(b.queue, d))
	}
	return n
}

// DeadLetters takes the messages in "<queue>.dlq" and hands them back.
func (b *broker) DeadLetters(t *testing.T) []adaptertest.DeadLetter {
	t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close() // hands back what was taken
	var out []adaptertest.DeadLetter
	for {
		d, ok, err := ch.Get(rabbitmq.DeadLetterQueue(b.queue), false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		reason, _ := d.Headers["x-grid-reason"].(string)
		out = append(out, adaptertest.DeadLetter{Body: string(d.Body), Reason: reason})
	}
}

// countIfDeclared is how many messages queue holds, 0 if it is not
// declared (Consume declares the retry queues).
func countIfDeclared(t *testing.T, conn *amqp.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var aerr *amqp.Error
	if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
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
	}, rabbitmq.WithPrefetch(1), rabbitmq.WithRetryDelays(delays...), rabbitmq.WithFingerprint(fingerprint), rabbitmq.WithEntity(entity), rabbitmq.WithRegisterer(reg))

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
	if err := rabbitmq.Consume(ctx, conn, c, "test", q, func(context.Context, amqp.Delivery, client.Lease) ([]byte, error) { return nil, nil },
		rabbitmq.WithDeadLetter("no-such-exchange-"+q, "x")); err == nil {
		t.Fatal("Consume with a missing dead-letter exchange started")
	}
	consume(t, conn, c, q, func(context.Context, amqp.Delivery, client.Lease) ([]byte, error) {
		return nil, client.Poison(errors.New("bad amount"))
	}, rabbitmq.WithRetryDelays(delays...), rabbitmq.WithDeadLetter("", q+".dlq"))
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
