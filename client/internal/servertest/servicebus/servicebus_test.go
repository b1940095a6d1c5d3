package servicebus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	"github.com/l4xg/grid/client/servicebus"
)

// These tests run on fakeQueue (no Service Bus emulator runs here) and a
// real grid node.

// harness runs the conformance suite on a fakeQueue of its own per
// scenario, whose lock lasts the suite's redelivery period.
var harness = adaptertest.Harness{
	Name: "servicebus",
	Open: func(t *testing.T, lock time.Duration) adaptertest.Broker {
		return &broker{q: newFakeQueue(lock, 100)}
	},
	Redelivers: true,
}

func TestConformance(t *testing.T) { adaptertest.Run(t, harness) }

type broker struct{ q *fakeQueue }

// Publish sends m with its key as the message id, or in the
// idempotency-key property with KeyElsewhere (under another message id).
func (b *broker) Publish(t *testing.T, m adaptertest.Message) {
	msg := azservicebus.ReceivedMessage{MessageID: m.Key, Body: []byte(m.Body), ApplicationProperties: map[string]any{}}
	if m.KeyElsewhere {
		msg.MessageID, msg.ApplicationProperties[servicebus.KeyProperty] = "id-of-"+m.Key, m.Key
	}
	if m.Correlation != "" {
		msg.CorrelationID = &m.Correlation
	}
	if m.Version != 0 {
		msg.ApplicationProperties["version"] = int(m.Version)
	}
	b.q.send(msg)
}

// Consumer is Consume on a receiver of its own, which schedules its
// retries; cut makes every call of the receiver fail.
func (b *broker) Consumer(t *testing.T, cfg adaptertest.Config) (func(context.Context) error, func()) {
	rcv := &dyingReceiver{q: b.q}
	opts := []servicebus.Option{servicebus.WithRetryScheduler(rcv),
		servicebus.WithFingerprint(func(msg *azservicebus.ReceivedMessage) uint64 { return adaptertest.Fingerprint(msg.Body) }),
		servicebus.WithEntity(func(msg *azservicebus.ReceivedMessage) (string, uint64, bool) {
			v, ok := msg.ApplicationProperties["version"].(int)
			return adaptertest.Entity, uint64(v), ok
		})}
	if cfg.Lease > 0 {
		opts = append(opts, servicebus.WithProcessOptions(client.WithLease(cfg.Lease)))
	}
	if cfg.InFlight > 0 {
		opts = append(opts, servicebus.WithBatch(cfg.InFlight))
	}
	opts = append(opts, servicebus.WithStopGrace(cfg.StopGrace))
	if cfg.Registerer != nil {
		opts = append(opts, servicebus.WithRegisterer(cfg.Registerer))
	}
	h := func(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error) {
		return nil, cfg.Handler(ctx, string(msg.Body), l)
	}
	return func(ctx context.Context) error {
		return servicebus.Consume(ctx, rcv, cfg.Grid, adaptertest.Namespace, h, opts...)
	}, rcv.die
}

// Pending is how many messages are waiting, locked or scheduled.
func (b *broker) Pending(t *testing.T) int { waiting, _, _ := b.q.state(); return waiting }

func (b *broker) DeadLetters(t *testing.T) []adaptertest.DeadLetter {
	var out []adaptertest.DeadLetter
	for _, m := range b.q.deadLetters() {
		out = append(out, adaptertest.DeadLetter{Body: m.body, Reason: m.reason})
	}
	return out
}

// dyingReceiver is the receiver (and retry scheduler) of a process that
// dies: after die, every call fails, as a dead process's would never reach
// the broker.
type dyingReceiver struct {
	q    *fakeQueue
	mu   sync.Mutex
	dead bool
}

var (
	_ servicebus.Receiver  = (*dyingReceiver)(nil)
	_ servicebus.Scheduler = (*dyingReceiver)(nil)
)

var errDead = errors.New("the process is gone")

func (d *dyingReceiver) die() { d.mu.Lock(); d.dead = true; d.mu.Unlock() }

func (d *dyingReceiver) gone() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.dead }

func (d *dyingReceiver) ReceiveMessages(ctx context.Context, max int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	if d.gone() {
		return nil, errDead
	}
	return d.q.ReceiveMessages(ctx, max, o)
}

func (d *dyingReceiver) CompleteMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.CompleteMessageOptions) error {
	if d.gone() {
		return errDead
	}
	return d.q.CompleteMessage(ctx, m, o)
}

func (d *dyingReceiver) AbandonMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.AbandonMessageOptions) error {
	if d.gone() {
		return errDead
	}
	return d.q.AbandonMessage(ctx, m, o)
}

func (d *dyingReceiver) DeadLetterMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.DeadLetterOptions) error {
	if d.gone() {
		return errDead
	}
	return d.q.DeadLetterMessage(ctx, m, o)
}

func (d *dyingReceiver) RenewMessageLock(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.RenewMessageLockOptions) error {
	if d.gone() {
		return errDead
	}
	return d.q.RenewMessageLock(ctx, m, o)
}

func (d *dyingReceiver) ScheduleMessages(ctx context.Context, msgs []*azservicebus.Message, at time.Time, o *azservicebus.ScheduleMessagesOptions) ([]int64, error) {
	if d.gone() {
		return nil, errDead
	}
	return d.q.ScheduleMessages(ctx, msgs, at, o)
}
