package servicebus_test

import (
	"context"
	"log"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/servicebus"
)

// A payment consumer on a Service Bus queue: each message is applied once,
// however often it is delivered; retries are scheduled copies.
func Example() {
	ctx := context.Background()
	sb, err := azservicebus.NewClientFromConnectionString("Endpoint=sb://example.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s", nil)
	if err != nil {
		log.Fatal(err)
	}
	rcv, err := sb.NewReceiverForQueue("payments", nil)
	if err != nil {
		log.Fatal(err)
	}
	snd, err := sb.NewSender("payments", nil)
	if err != nil {
		log.Fatal(err)
	}
	grid, err := client.Dial(ctx, "127.0.0.1:7420")
	if err != nil {
		log.Fatal(err)
	}
	err = servicebus.Consume(ctx, rcv, grid, "payments",
		func(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error) {
			return applyPayment(ctx, msg.Body, l.Token)
		}, servicebus.WithRetryScheduler(snd))
	log.Print(err)
}

func applyPayment(context.Context, []byte, uint64) ([]byte, error) { return nil, nil }
