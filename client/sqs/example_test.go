package sqs_test

import (
	"context"
	"log"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/sqs"
)

// A payment consumer on an SQS queue: each message is applied once,
// however often SQS delivers it.
func Example() {
	ctx := context.Background()
	api := awssqs.New(awssqs.Options{Region: "eu-west-1"}) // or awssqs.NewFromConfig(cfg)
	grid, err := client.Dial(ctx, "127.0.0.1:7420")
	if err != nil {
		log.Fatal(err)
	}
	queue := "https://sqs.eu-west-1.amazonaws.com/123456789012/payments"
	err = sqs.Consume(ctx, api, queue, grid, "payments",
		func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
			return applyPayment(ctx, msg.Body, l.Token)
		}, sqs.WithDeadLetterQueue(queue+"-dlq"))
	log.Print(err)
}

func applyPayment(context.Context, *string, uint64) ([]byte, error) { return nil, nil }
