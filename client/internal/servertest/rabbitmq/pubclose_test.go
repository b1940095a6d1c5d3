package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	"github.com/l4xg/grid/client/rabbitmq"
	"github.com/l4xg/grid/internal/testwait"
)

// TestPublishingChannelClosedEndsConsume: when the broker closes the
// publishing channel (here: a dead letter published to an exchange that
// was deleted after Consume started, which RabbitMQ answers by closing the
// channel), Consume returns the error instead of handing every message
// that needs a copy back for ever, and the message is still in its queue.
func TestPublishingChannelClosedEndsConsume(t *testing.T) {
	conn := dial(t)
	q := testQueue(t, conn)
	grid, _ := adaptertest.Grid(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	exchange := "grid-test-dlx-" + q
	if err := ch.ExchangeDeclare(exchange, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- rabbitmq.Consume(ctx, conn, grid, "test", q, func(context.Context, amqp.Delivery, client.Lease) ([]byte, error) {
			return nil, nil
		}, rabbitmq.WithDeadLetter(exchange, ""), rabbitmq.WithErrorDelay(50*time.Millisecond))
	}()
	// Consume has declared its queues and consumes: the queue has a
	// consumer.
	testwait.For(t, 20*time.Second, "Consume to start", func() bool {
		st, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
		return err == nil && st.Consumers > 0
	})
	if err := ch.ExchangeDelete(exchange, false, false); err != nil {
		t.Fatal(err)
	}
	publish(t, conn, q, "", "keyless", nil) // no key: a dead letter
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "publishing channel closed") {
			t.Fatalf("Consume returned %v, want the publishing channel's error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Consume went on without its publishing channel")
	}
	testwait.For(t, 20*time.Second, "the keyless message back in its queue", func() bool { return count(t, conn, q) == 1 })
}
