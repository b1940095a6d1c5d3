package ledger

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Brokers are the brokers a run can use (--broker).
func Brokers() []string { return []string{brokerRabbitMQ, brokerKafka, brokerJetStream} }

// Reachable reports whether the services the run needs answer:
// PostgreSQL, and the broker (RabbitMQ, or NATS with JetStream; Kafka is a
// kfake cluster the run starts itself). The error names the service.
func (c Config) Reachable(ctx context.Context) error {
	db, err := sql.Open("pgx", c.pgDSN)
	if err == nil {
		err = db.PingContext(ctx)
		db.Close()
	}
	if err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", c.pgDSN, err)
	}
	switch c.broker {
	case brokerRabbitMQ:
		conn, err := amqp.Dial(c.amqpURL)
		if err != nil {
			return fmt.Errorf("RabbitMQ at %s: %w", c.amqpURL, err)
		}
		conn.Close()
	case brokerJetStream:
		nc, err := nats.Connect(c.natsURL)
		if err != nil {
			return fmt.Errorf("NATS at %s: %w", c.natsURL, err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err == nil {
			_, err = js.AccountInfo(ctx)
		}
		if err != nil {
			return fmt.Errorf("JetStream at %s: %w", c.natsURL, err)
		}
	}
	return nil
}
