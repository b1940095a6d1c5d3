package kafka_test

import (
	"context"
	"log"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A payment consumer in a consumer group: each record is applied once,
// however often the group delivers it; the committed offsets only move past
// records that are settled.
func Example() {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"), kgo.ConsumerGroup("ledger"),
		kgo.ConsumeTopics("payments"), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	grid, err := client.Dial(ctx, "127.0.0.1:7420")
	if err != nil {
		log.Fatal(err)
	}
	err = kafka.Consume(ctx, cl, grid, "payments",
		func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) {
			return applyPayment(ctx, r.Value, l.Token)
		}, kafka.WithDeadLetterTopic("payments.dlq"))
	log.Print(err)
}

func applyPayment(context.Context, []byte, uint64) ([]byte, error) { return nil, nil }
