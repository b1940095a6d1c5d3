package adaptertest

import (
	"context"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/prometheus/client_golang/prometheus"
)

// Namespace is the grid namespace the suite's consumers run in.
const Namespace = "test"

// Entity is the entity whose versions the suite's messages carry.
const Entity = "account-7"

// Fingerprint is the fingerprint of a message's payload that every
// harness gives its adapter: a key reused for a body of another length
// answers MISMATCH.
func Fingerprint(body []byte) uint64 { return uint64(len(body)) + 1 }

// A Harness is what the suite needs of one adapter: how to open a broker
// for a scenario, and where the adapter legitimately differs from the
// others, as data. The zero value of each difference is the common case.
type Harness struct {
	// Name is the adapter's name in its metrics' adapter label.
	Name string

	// Open returns a broker of the scenario's own: a fresh topic, queue or
	// stream (and dead-letter destination), removed when the test ends.
	// redelivery is how long the broker leaves a delivered message with
	// its consumer before delivering it again, unless the consumer says it
	// is still working on it, for a broker that has such a period (see
	// Redelivers); others ignore it.
	Open func(t *testing.T, redelivery time.Duration) Broker

	// Redelivers is set when the broker delivers a message again once its
	// consumer has held it for the redelivery period without a sign of life
	// (JetStream's ack wait, Service Bus's lock, SQS's visibility timeout),
	// and clear when only a consumer's death gives its messages to another
	// (Kafka's group, RabbitMQ's channel). The long-handler scenario runs
	// only when it is set.
	Redelivers bool

	// Keyless is the key the adapter derives for the suite's message
	// without one, the fourth on lane 1 (Kafka's "<topic>/1/3", its
	// offset), or "" when the adapter dead-letters that message as no_key.
	Keyless string

	// Rewinds is how many of the messages after a retried one on its lane
	// the adapter surely runs through the grid again: Kafka rewinds a
	// partition to a retried record, and the records after it, already
	// completed, come again and answer DUPLICATE. With 0, the suite
	// expects exactly one DUPLICATE (the second copy of "dup").
	Rewinds int

	// SerialKeys is set when messages of one key taken together run one
	// after the other (Kafka, within a poll), so the second answers
	// DUPLICATE and never BUSY.
	SerialKeys bool

	// CrashRedeliversAtOnce is set when a dead consumer's unsettled message
	// goes to the next consumer at once (RabbitMQ, when the connection
	// drops), so the next consumer surely finds the key still leased and
	// retries it after BUSY at least once.
	CrashRedeliversAtOnce bool

	// StrayDeliveries is set when a stopped consumer may leave one of the
	// messages it handed back delivered to it on the broker, with nobody to
	// handle it until the redelivery period ends (a JetStream pull request
	// still open on the server). The shutdown scenario then opens the
	// broker with a short period; otherwise with one longer than it waits,
	// so that the messages must come back at once.
	StrayDeliveries bool
}

// A Broker is one scenario's broker with the adapter on it. Its methods
// are called from the test's goroutine, one at a time.
type Broker interface {
	// Publish sends m and returns once the broker holds it.
	Publish(t *testing.T, m Message)

	// Consumer returns the adapter's Consume, on a connection of its own
	// to the broker, in Namespace, started as cfg says and with the
	// harness's key rule, Entity's versions from Message.Version,
	// Fingerprint and dead-letter destination; and cut, which ends that
	// connection: nothing the consumer does reaches the broker after it,
	// as when its process has died. cut may be called after consume has
	// returned (closing a Kafka client leaves the group), and need not be:
	// the connection is closed when the test ends.
	Consumer(t *testing.T, cfg Config) (consume func(ctx context.Context) error, cut func())

	// Pending is how many of the published messages the broker still
	// holds for its consumers: not yet delivered, delivered and not
	// settled (where the broker can tell), or waiting to be retried.
	// Messages set aside are not pending. It may count a message handed
	// back twice (JetStream's counts do), but is 0 only when every message
	// is settled.
	Pending(t *testing.T) int

	// DeadLetters are the messages set aside, in any order.
	DeadLetters(t *testing.T) []DeadLetter
}

// Message is a message the suite publishes.
type Message struct {
	Key  string // the idempotency key; "" for none
	Body string
	// KeyElsewhere carries Key the adapter's second way, where it has
	// one: a header or property rather than the message id (RabbitMQ,
	// Service Bus). Others ignore it.
	KeyElsewhere bool
	Correlation  string // the correlation id; "" for none
	Version      uint64 // Entity's version; 0 for none
	// Lane is kept in order with the other messages of its lane where the
	// broker orders messages by something (Kafka: the partition). Lanes
	// are 0 and 1.
	Lane int
}

// DeadLetter is a message set aside.
type DeadLetter struct {
	Body   string
	Reason string // the adapter's reason, "<outcome>: <cause>"
}

// Config is how the suite wants a consumer started.
type Config struct {
	Grid    *client.Client
	Handler Handler
	// Lease is the keys' lease (client.WithLease); 0 for the client's.
	Lease time.Duration
	// InFlight is how many messages the consumer takes at once (prefetch,
	// batch, concurrency, poll size); 0 for the adapter's default.
	InFlight int
	// Registerer registers the adapter's metrics; nil for none.
	Registerer prometheus.Registerer
	// StopGrace is the consumer's stop grace (WithStopGrace): how long a
	// stopping consumer lets its running handlers go on; 0 cancels them
	// at once.
	StopGrace time.Duration
}

// Handler is the suite's handler of a message with body under lease l. It
// runs in the adapter's handler.
type Handler func(ctx context.Context, body string, l client.Lease) error

// Run runs the conformance suite on the adapter h describes, each
// scenario a subtest with a broker and a grid node of its own.
func Run(t *testing.T, h Harness) {
	t.Run("Outcomes", func(t *testing.T) { testOutcomes(t, h) })
	t.Run("CrashMidHandlerIsTakenOver", func(t *testing.T) { testCrashMidHandler(t, h) })
	t.Run("CrashLoopPoisonsOnlyItsCulprit", func(t *testing.T) { testCrashLoop(t, h) })
	t.Run("ShutdownHandsMessagesBack", func(t *testing.T) { testShutdown(t, h) })
	t.Run("LongHandlerKeepsItsMessage", func(t *testing.T) {
		if !h.Redelivers {
			t.Skipf("%s delivers a message again only when its consumer dies", h.Name)
		}
		testLongHandler(t, h)
	})
}

// start runs a consumer of b until the test ends; stop ends it and
// returns Consume's error, cut closes its connection.
func start(t *testing.T, b Broker, cfg Config) (stop func() error, cut func()) {
	t.Helper()
	consume, cut := b.Consumer(t, cfg)
	return Start(t, consume), cut
}
