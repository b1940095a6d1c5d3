// Package servicebus runs the grid's idempotent receiver on an Azure
// Service Bus queue or subscription, over the broker's own Go client
// (github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus): every
// message goes through client.Process, and its outcome becomes what Service
// Bus understands.
//
//	rcv, _ := sbClient.NewReceiverForQueue("payments", nil)
//	err := servicebus.Consume(ctx, rcv, grid, "payments", handle)
//
// No Service Bus emulator runs where this package is built, so it is
// written against Receiver (and Scheduler), small interfaces that
// *azservicebus.Receiver (and *azservicebus.Sender) satisfy, as the
// compile-time assertions below check, and its tests run on an in-memory
// fake of a queue's peek-lock semantics (locks that expire, delivery
// counts, scheduled messages, the dead-letter queue). It has not been run
// against Service Bus itself.
//
// # Outcomes
//
//	the handler succeeded (COMPLETED)        CompleteMessage
//	DUPLICATE, STALE                         CompleteMessage: handled before
//	the handler failed, retryably (FAILED)   with WithRetryScheduler: a copy scheduled at the
//	BUSY (another consumer holds the key)    grid's retry-after (BUSY at most WithBusyDelay),
//	the grid unreachable, a lease lost       then CompleteMessage; without it AbandonMessage,
//	                                         which redelivers at once and counts towards the
//	                                         queue's MaxDeliveryCount
//	POISONED, MISMATCH, no key               DeadLetterMessage with the reason and description
//	shutdown (ctx ended)                     running handlers finish within WithStopGrace and
//	                                         settle as above; one cancelled past it: the key
//	                                         is failed (attempt counted), AbandonMessage
//
// While the handler runs, the message's lock is renewed (RenewMessageLock)
// every third of what is left of it, so Service Bus does not hand the
// message to another receiver while the grid still leases its key.
//
// # Keys
//
// The key is the "idempotency-key" application property when the message
// has one (a string), else its MessageID, which the producer sets (with
// duplicate detection on the queue, Service Bus also drops a resend within
// its window). WithKey replaces the rule.
package servicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/prometheus/client_golang/prometheus"
)

// Receiver is what Consume needs of *azservicebus.Receiver (peek-lock).
type Receiver interface {
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(ctx context.Context, msg *azservicebus.ReceivedMessage, options *azservicebus.CompleteMessageOptions) error
	AbandonMessage(ctx context.Context, msg *azservicebus.ReceivedMessage, options *azservicebus.AbandonMessageOptions) error
	DeadLetterMessage(ctx context.Context, msg *azservicebus.ReceivedMessage, options *azservicebus.DeadLetterOptions) error
	RenewMessageLock(ctx context.Context, msg *azservicebus.ReceivedMessage, options *azservicebus.RenewMessageLockOptions) error
}

// Scheduler is what a delayed retry needs of *azservicebus.Sender for the
// same queue or topic.
type Scheduler interface {
	ScheduleMessages(ctx context.Context, msgs []*azservicebus.Message, at time.Time, options *azservicebus.ScheduleMessagesOptions) ([]int64, error)
}

var (
	_ Receiver  = (*azservicebus.Receiver)(nil)
	_ Scheduler = (*azservicebus.Sender)(nil)
)

// KeyProperty is the application property that carries a message's
// idempotency key.
const KeyProperty = "idempotency-key"

// Handler processes one message under the grid's lease. ctx carries the
// message's CorrelationID (client.CorrelationID) and ends when the lease is
// lost, or when Consume stops and its stop grace (WithStopGrace) has run
// out.
type Handler func(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error)

// Option configures Consume.
type Option func(*config)

type config struct {
	batch       int
	key         func(*azservicebus.ReceivedMessage) (string, error)
	process     []client.ProcessOption
	fingerprint func(*azservicebus.ReceivedMessage) uint64
	entity      func(*azservicebus.ReceivedMessage) (entity string, version uint64, ok bool)
	delays      adapter.Delays
	scheduler   Scheduler
	registerer  prometheus.Registerer
	logger      *slog.Logger
}

// WithBatch sets how many messages a receive takes, and so how many run at
// once. Default 32.
func WithBatch(n int) Option { return func(c *config) { c.batch = n } }

// WithKey sets how a message's idempotency key is found. An error
// dead-letters the message.
func WithKey(f func(*azservicebus.ReceivedMessage) (string, error)) Option {
	return func(c *config) { c.key = f }
}

// WithFingerprint sets a fingerprint of the payload: the same key with
// another fingerprint answers MISMATCH, and the message is dead-lettered.
func WithFingerprint(f func(*azservicebus.ReceivedMessage) uint64) Option {
	return func(c *config) { c.fingerprint = f }
}

// WithEntity names the entity a message changes and its version, when it
// has them (ok): a version not newer than the entity's last completed one
// answers STALE, and the message is completed without running the handler.
func WithEntity(f func(*azservicebus.ReceivedMessage) (entity string, version uint64, ok bool)) Option {
	return func(c *config) { c.entity = f }
}

// WithProcessOptions passes options to every client.Process call.
func WithProcessOptions(opts ...client.ProcessOption) Option {
	return func(c *config) { c.process = append(c.process, opts...) }
}

// WithRetryScheduler delays retries: a copy of the message is scheduled on
// s (a sender for the same queue or topic) at the retry-after, and the
// message is completed. Without it a retry abandons the message, which
// Service Bus delivers again at once.
func WithRetryScheduler(s Scheduler) Option { return func(c *config) { c.scheduler = s } }

// WithErrorDelay sets the retry delay when the grid could not be asked or
// the lease was lost. Default 1s.
func WithErrorDelay(d time.Duration) Option { return func(c *config) { c.delays.Error = d } }

// WithStopGrace sets how long a stopping Consume (its ctx ended) lets the
// handlers it started finish and settle before it cancels them (default
// 10 s). A handler cancelled mid-way may have applied its effect, so its
// key is failed, the attempt counted, not released: give handlers the
// time their effect takes. 0 cancels them at once.
func WithStopGrace(d time.Duration) Option { return func(c *config) { c.delays.StopGrace = d } }

// WithBusyDelay caps the retry delay after BUSY. Default 1s.
func WithBusyDelay(d time.Duration) Option { return func(c *config) { c.delays.Busy = d } }

// WithRegisterer registers the adapter's metrics:
// l4xg_grid_adapter_messages_total{adapter="servicebus",outcome,action}.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }

// WithLogger logs what the adapter does to a message besides completing it.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// DefaultKey is the default key rule: the "idempotency-key" application
// property, else the message id.
func DefaultKey(msg *azservicebus.ReceivedMessage) (string, error) {
	if v, ok := msg.ApplicationProperties[KeyProperty]; ok {
		if s, ok := v.(string); ok && s != "" {
			return s, nil
		}
		return "", fmt.Errorf("servicebus: property %s is %T, not a non-empty string", KeyProperty, v)
	}
	if msg.MessageID != "" {
		return msg.MessageID, nil
	}
	return "", fmt.Errorf("servicebus: the message has neither an %s property nor a message id", KeyProperty)
}

// Consume receives messages from rcv, runs h for each through grid.Process
// in namespace ns, and settles each by the outcome (see the package
// documentation). It returns nil once ctx has ended and every message it
// received is settled, or the error of a receive that failed.
func Consume(ctx context.Context, rcv Receiver, grid *client.Client, ns string, h Handler, opts ...Option) error {
	cfg := config{batch: 32, key: DefaultKey, delays: adapter.DefaultDelays()}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case rcv == nil || grid == nil || h == nil:
		return errors.New("servicebus: Consume needs a receiver, a grid client and a handler")
	case cfg.batch < 1:
		return fmt.Errorf("servicebus: batch %d, want at least 1", cfg.batch)
	case cfg.key == nil:
		return errors.New("servicebus: nil key rule")
	case cfg.delays.Error <= 0 || cfg.delays.Busy <= 0:
		return fmt.Errorf("servicebus: error delay %v and busy delay %v, want both more than 0", cfg.delays.Error, cfg.delays.Busy)
	}
	m, err := adapter.NewMetrics("servicebus", cfg.registerer)
	if err != nil {
		return err
	}
	r := &receiver{cfg: cfg, rcv: rcv, grid: grid, ns: ns, h: h, m: m}
	for ctx.Err() == nil {
		msgs, err := rcv.ReceiveMessages(ctx, cfg.batch, nil)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("servicebus: receive: %w", err)
		}
		var wg sync.WaitGroup
		for _, msg := range msgs {
			wg.Go(func() { r.handle(ctx, msg) })
		}
		wg.Wait()
	}
	return nil
}

type receiver struct {
	cfg  config
	rcv  Receiver
	grid *client.Client
	ns   string
	h    Handler
	m    *adapter.Metrics
}

// handle processes msg and settles it.
func (r *receiver) handle(ctx context.Context, msg *azservicebus.ReceivedMessage) {
	if ctx.Err() != nil {
		r.settle(ctx, msg, adapter.Verdict{Outcome: adapter.NotStarted, Action: adapter.Requeue})
		return
	}
	key, err := r.cfg.key(msg)
	if err != nil {
		r.settle(ctx, msg, adapter.Verdict{Outcome: adapter.NoKey, Action: adapter.DeadLetter, Cause: err})
		return
	}
	popts := adapter.ProcessOptions(r.cfg.process, msg, r.cfg.fingerprint, r.cfg.entity)
	corr := ""
	if msg.CorrelationID != nil {
		corr = *msg.CorrelationID
	}
	dctx, dcancel := adapter.Draining(ctx, r.cfg.delays.StopGrace)
	defer dcancel()
	hctx := client.ContextWithCorrelationID(dctx, corr)
	out, err := r.grid.Process(hctx, r.ns, key, func(ctx context.Context, l client.Lease) ([]byte, error) {
		stop := r.renewLock(ctx, msg)
		defer stop()
		return r.h(ctx, msg, l)
	}, popts...)
	r.settle(ctx, msg, adapter.Judge(ctx, out, err, r.cfg.delays))
}

// Renewal backoff: after a failed renewal the next one waits
// renewBackoff, doubled for each failure in a row up to maxRenewBackoff,
// instead of a third of a lock that did not move.
const (
	renewBackoff    = 100 * time.Millisecond
	maxRenewBackoff = 5 * time.Second
)

// renewLock renews msg's lock, every third of what is left of it, until
// stop is called. A renewal that fails is tried again after a backoff
// (renewWait): the lock did not move, and a third of what is left of it
// would soon be a busy loop against the service. A lock that is lost for
// good (the message was delivered again) leaves the grid to answer the
// redelivery.
func (r *receiver) renewLock(ctx context.Context, msg *azservicebus.ReceivedMessage) (stop func()) {
	failures := 0 // in a row; next and touch run on KeepAlive's one goroutine
	next := func() time.Duration { return renewWait(failures, msg.LockedUntil, time.Now()) }
	// RenewMessageLock moves msg.LockedUntil on.
	return adapter.KeepAlive(ctx, next, func(ctx context.Context) {
		if err := r.rcv.RenewMessageLock(ctx, msg, nil); err != nil {
			failures++
			return
		}
		failures = 0
	})
}

// renewWait is the wait before the next renewal of a lock held until
// lockedUntil (nil: not known), after failures failed renewals in a row:
// a third of what is left of the lock, at least 10 ms; after a failure,
// renewBackoff doubled per failure, at most maxRenewBackoff.
func renewWait(failures int, lockedUntil *time.Time, now time.Time) time.Duration {
	if failures > 0 {
		return min(renewBackoff<<min(failures-1, 16), maxRenewBackoff)
	}
	if lockedUntil == nil {
		return 10 * time.Second
	}
	return max(lockedUntil.Sub(now)/3, 10*time.Millisecond)
}

// settle does v's action to msg.
func (r *receiver) settle(ctx context.Context, msg *azservicebus.ReceivedMessage, v adapter.Verdict) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	action := v.Action
	var err error
	switch v.Action {
	case adapter.Ack:
		err = r.rcv.CompleteMessage(sctx, msg, nil)
	case adapter.Requeue:
		err = r.rcv.AbandonMessage(sctx, msg, nil)
	case adapter.DeadLetter:
		reason, desc := string(v.Outcome), ""
		if v.Cause != nil {
			desc = v.Cause.Error()
		}
		err = r.rcv.DeadLetterMessage(sctx, msg, &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &desc})
	case adapter.Retry:
		if r.cfg.scheduler == nil {
			action = adapter.Requeue
			err = r.rcv.AbandonMessage(sctx, msg, nil)
			break
		}
		if _, err = r.cfg.scheduler.ScheduleMessages(sctx, []*azservicebus.Message{copyOf(msg)}, time.Now().Add(v.Delay), nil); err != nil {
			// Not scheduled: hand the message back instead.
			action = adapter.Requeue
			err = errors.Join(err, r.rcv.AbandonMessage(sctx, msg, nil))
			break
		}
		err = r.rcv.CompleteMessage(sctx, msg, nil)
	}
	r.m.Count(v.Outcome, action)
	if r.cfg.logger != nil && (action != adapter.Ack || v.Cause != nil || err != nil) {
		r.cfg.logger.Info("servicebus: message settled", "message_id", msg.MessageID, "outcome", v.Outcome,
			"action", action, "delay", v.Delay, "cause", v.Cause, "error", err)
	}
}

// copyOf is a message to send that carries what msg carried.
func copyOf(msg *azservicebus.ReceivedMessage) *azservicebus.Message {
	id := msg.MessageID
	props := make(map[string]any, len(msg.ApplicationProperties))
	for k, v := range msg.ApplicationProperties {
		props[k] = v
	}
	return &azservicebus.Message{
		MessageID: &id, Body: msg.Body, ApplicationProperties: props, ContentType: msg.ContentType,
		CorrelationID: msg.CorrelationID, PartitionKey: msg.PartitionKey, ReplyTo: msg.ReplyTo,
	}
}
