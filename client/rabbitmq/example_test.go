package rabbitmq_test

import (
	"context"
	"log"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

// A payment consumer: each message is applied once, however often RabbitMQ
// delivers it. The fencing token goes with the ledger write, so that a
// consumer whose lease was lost cannot overwrite its successor's.
func Example() {
	ctx := context.Background()
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	grid, err := client.Dial(ctx, "127.0.0.1:7420")
	if err != nil {
		log.Fatal(err)
	}
	err = rabbitmq.Consume(ctx, conn, grid, "payments", "payments",
		func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
			return applyPayment(ctx, d.Body, l.Token)
		})
	log.Fatal(err)
}

func applyPayment(context.Context, []byte, uint64) ([]byte, error) { return nil, nil }
