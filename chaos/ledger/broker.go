package ledger

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// The brokers a run can go through (--broker).
const (
	brokerRabbitMQ  = "rabbitmq"
	brokerKafka     = "kafka"
	brokerJetStream = "jetstream"
)

// broker is the parent's side of one message broker: it makes the
// queues, publishes the payments, tells how much the consumers have left,
// and reads what was set aside. The consumers' side is consumeFunc.
type broker interface {
	// publish publishes ps in order and returns once the broker has
	// stored them all.
	publish(ctx context.Context, ps []payment) error
	// pending is how many payments the broker still holds for the
	// consumers: 0 once every payment it was given is settled (acked,
	// committed or set aside).
	pending(ctx context.Context) (int, error)
	// deadLetters returns what was set aside since the last call: the
	// adapter's dead letters, and those the broker made or dropped itself
	// when a message ran out of its deliveries.
	deadLetters(ctx context.Context) ([]deadLetter, error)
	// consumerArgs are the flags that tell a consumer process where to
	// consume (given to ConsumerMain after the common ones).
	consumerArgs() []string
	// close removes what the broker made for the run.
	close()
}

// deadLetter is one copy of a payment that was set aside.
type deadLetter struct {
	key    string
	reason string
	// dropped: the broker gave the message up without a copy anywhere
	// (JetStream's MaxDeliver): it is reported, never a dead letter.
	dropped bool
}

// openBroker makes the run's queues on the broker named by cfg.broker;
// name is the run's own prefix for them, log takes the broker's warnings.
func openBroker(ctx context.Context, cfg Config, name string, log io.Writer) (broker, error) {
	switch cfg.broker {
	case brokerRabbitMQ:
		return openRabbitMQ(cfg, name)
	case brokerKafka:
		return openKafka(ctx, name, log)
	case brokerJetStream:
		return openJetStream(ctx, cfg, name)
	}
	return nil, fmt.Errorf("ledger: unknown broker %q", cfg.broker)
}

// gridReason condenses the reason an adapter gives a dead letter,
// "<outcome>: <the client's error chain>", to the outcome and the
// handler's own words (the last link of the chain). A payment the grid
// answered POISONED at Reserve, without running a handler (its attempts
// used up, or a copy of a payment poisoned before), reads "poisoned:
// answered POISONED at Reserve".
func gridReason(reason string) string {
	outcome, detail, _ := strings.Cut(reason, ": ")
	detail, _, _ = strings.Cut(detail, " (attempts")
	if i := strings.LastIndex(detail, ": "); i >= 0 {
		detail = detail[i+2:]
	}
	switch detail {
	case "":
		return outcome
	case "poisoned":
		detail = "answered POISONED at Reserve"
	}
	return outcome + ": " + detail
}
