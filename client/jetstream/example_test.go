package jetstream_test

import (
	"context"
	"log"

	"github.com/l4xg/grid/client"
	gridjs "github.com/l4xg/grid/client/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A payment consumer on a durable JetStream consumer: each message is
// applied once, however often JetStream delivers it.
func Example() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.Consumer(ctx, "PAYMENTS", "ledger")
	if err != nil {
		log.Fatal(err)
	}
	grid, err := client.Dial(ctx, "127.0.0.1:7420")
	if err != nil {
		log.Fatal(err)
	}
	err = gridjs.Consume(ctx, cons, grid, "payments",
		func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
			return applyPayment(ctx, msg.Data(), l.Token)
		}, gridjs.WithDeadLetter(js, "payments.dlq"))
	log.Fatal(err)
}

func applyPayment(context.Context, []byte, uint64) ([]byte, error) { return nil, nil }
