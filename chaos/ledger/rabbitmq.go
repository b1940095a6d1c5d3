package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// retryDelays are the RabbitMQ consumers' retry queues.
func retryDelays() []time.Duration {
	return []time.Duration{200 * time.Millisecond, time.Second, 5 * time.Second}
}

// rabbitBroker is the run's queues on RabbitMQ: the payments' quorum
// queue, whose delivery limit (x-delivery-limit) is the broker's own
// budget, and whose dead-letter route leads to the adapter's dead-letter
// queue "<queue>.dlq"; the retry queues of retryDelays.
type rabbitBroker struct {
	url   string
	queue string
	conn  *amqp.Connection
}

var _ broker = (*rabbitBroker)(nil)

func openRabbitMQ(cfg Config, name string) (*rabbitBroker, error) {
	conn, err := amqp.Dial(cfg.amqpURL)
	if err != nil {
		return nil, fmt.Errorf("ledger: RabbitMQ at %s: %w", cfg.amqpURL, err)
	}
	b := &rabbitBroker{url: cfg.amqpURL, queue: name, conn: conn}
	if err := b.declare(cfg.deliveryLimit); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// declare declares the dead-letter queue, the payments' queue and the
// retry queues. A payment returned to the queue more than limit times
// (its consumer died holding it, or handed it back) is dead-lettered by
// RabbitMQ to the dead-letter queue, with an x-death header and no
// x-grid-reason.
func (b *rabbitBroker) declare(limit int) error {
	ch, err := b.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	dlq := rabbitmq.DeadLetterQueue(b.queue)
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
		return fmt.Errorf("ledger: declare: %w", err)
	}
	args := amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
	if limit > 0 {
		args["x-delivery-limit"] = limit
	}
	if _, err := ch.QueueDeclare(b.queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("ledger: declare: %w", err)
	}
	for _, d := range retryDelays() {
		if _, err := ch.QueueDeclare(rabbitmq.RetryQueue(b.queue, d), true, false, false, false, amqp.Table{
			"x-message-ttl": d.Milliseconds(), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": b.queue,
		}); err != nil {
			return fmt.Errorf("ledger: declare: %w", err)
		}
	}
	return nil
}

func (b *rabbitBroker) consumerArgs() []string {
	return []string{"--broker-addr", b.url, "--queue", b.queue}
}

// publish publishes the payments with publisher confirms, 256 at a time.
func (b *rabbitBroker) publish(ctx context.Context, ps []payment) error {
	ch, err := b.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	var confirms []*amqp.DeferredConfirmation
	for _, p := range ps {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", b.queue, false, false, amqp.Publishing{
			MessageId: p.key, CorrelationId: "corr-" + p.key, DeliveryMode: amqp.Persistent, Body: []byte(p.body),
		})
		if err != nil {
			return fmt.Errorf("ledger: publish: %w", err)
		}
		confirms = append(confirms, c)
		if len(confirms) >= 256 {
			if err := waitConfirms(ctx, confirms); err != nil {
				return err
			}
			confirms = confirms[:0]
		}
	}
	return waitConfirms(ctx, confirms)
}

func waitConfirms(ctx context.Context, cs []*amqp.DeferredConfirmation) error {
	for _, c := range cs {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("ledger: publish confirm: %w", err)
		}
		if !ok {
			return errors.New("ledger: the broker refused a payment")
		}
	}
	return nil
}

// pending is how many messages the queue and its retry queues hold ready.
// Those delivered and unacked are not counted while their consumer lives
// (they show in the queue once it is gone).
func (b *rabbitBroker) pending(context.Context) (int, error) {
	n := 0
	for _, q := range append([]string{b.queue}, b.retryQueues()...) {
		d, err := b.depth(q)
		if err != nil {
			return 0, err
		}
		n += d
	}
	return n, nil
}

func (b *rabbitBroker) retryQueues() []string {
	var names []string
	for _, d := range retryDelays() {
		names = append(names, rabbitmq.RetryQueue(b.queue, d))
	}
	return names
}

// depth is how many ready messages q holds.
func (b *rabbitBroker) depth(q string) (int, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("ledger: queue %s: %w", q, err)
	}
	return st.Messages, nil
}

// deadLetters takes every message out of the dead-letter queue. The
// adapter's copies carry x-grid-reason; one RabbitMQ dead-lettered itself
// (the delivery limit) carries the reason in its x-death entry for the
// queue.
func (b *rabbitBroker) deadLetters(context.Context) ([]deadLetter, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var out []deadLetter
	for {
		d, ok, err := ch.Get(rabbitmq.DeadLetterQueue(b.queue), true)
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		if reason, ok := d.Headers["x-grid-reason"].(string); ok {
			out = append(out, deadLetter{key: d.MessageId, reason: gridReason(reason)})
			continue
		}
		out = append(out, deadLetter{key: d.MessageId, reason: "broker: " + b.deathReason(d)})
	}
}

// deathReason is the reason of d's x-death entry for the payments' queue
// ("delivery_limit"); the entries of the retry queues read "expired".
func (b *rabbitBroker) deathReason(d amqp.Delivery) string {
	deaths, _ := d.Headers["x-death"].([]any)
	for _, e := range deaths {
		if t, ok := e.(amqp.Table); ok && t["queue"] == b.queue {
			if r, ok := t["reason"].(string); ok {
				return r
			}
		}
	}
	return "no reason given"
}

// close deletes the run's queues, on a connection of its own: the run's
// may have broken.
func (b *rabbitBroker) close() {
	b.conn.Close()
	conn, err := amqp.Dial(b.url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, q := range append([]string{b.queue, rabbitmq.DeadLetterQueue(b.queue)}, b.retryQueues()...) {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
}

// consumeRabbitMQ consumes the queue through client/rabbitmq, dead letters
// to "<queue>.dlq".
func consumeRabbitMQ(ctx context.Context, grid *client.Client, f consumerFlags, pay payFunc) error {
	conn, err := amqp.Dial(f.addr)
	if err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	defer conn.Close()
	h := func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) { return pay(ctx, d.Body, l) }
	return rabbitmq.Consume(ctx, conn, grid, namespace, f.queue, h,
		rabbitmq.WithPrefetch(f.prefetch), rabbitmq.WithRetryDelays(retryDelays()...), rabbitmq.WithoutDeclare(),
		rabbitmq.WithDeadLetter("", rabbitmq.DeadLetterQueue(f.queue)),
		rabbitmq.WithProcessOptions(client.WithLease(f.lease)))
}
