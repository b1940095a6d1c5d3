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
//	the handler failed, retryably (FAILED)   a retry after the grid's retry-after (BUSY: at
//	BUSY (another consumer holds the key)    most WithBusyDelay; an error: WithErrorDelay).
//	the grid unreachable, a lease lost       Without WithRetryScheduler (the default): the
//	                                         message is kept, locked, and run through the grid
//	                                         again in place, for up to WithRetryHold (30s);
//	                                         then AbandonMessage. With it: a copy under a new
//	                                         MessageID scheduled at the retry-after, then
//	                                         CompleteMessage. See Retries.
//	POISONED, MISMATCH, no key               DeadLetterMessage with the reason and description
//	shutdown (ctx ended)                     running handlers finish within WithStopGrace and
//	                                         settle as above; one cancelled past it: the key
//	                                         is failed (attempt counted), AbandonMessage; a
//	                                         kept message: AbandonMessage at once
//
// While the handler runs, and while a message is kept for a retry, the
// message's lock is renewed (RenewMessageLock) every third of what is left
// of it, so Service Bus does not hand the message to another receiver while
// the grid still leases its key.
//
// # Retries
//
// Every AbandonMessage spends one of the message's deliveries, and a
// message that has spent the queue's MaxDeliveryCount (default 10) is
// dead-lettered by Service Bus. An abandoned message is delivered again at
// once, long before the grid's retry-after ends: the grid answers the
// redelivery BUSY, which abandons it again, and one transient failure would
// use up every delivery within the grid's 1 s backoff.
//
// So, by default, a message whose verdict is a retry is kept: its lock is
// renewed, and after the delay it is run through the grid again on the same
// delivery (its DeliveryCount does not move). A message is kept for at
// most WithRetryHold (30s, the client's default lease) from its first
// retry; still to be retried then, it is abandoned (one delivery per hold,
// not one per retry) and Service Bus delivers it again at once. A kept
// message occupies one of the WithBatch slots, but Consume goes on
// receiving into the others. What this risks: a message kept past what its
// lock can be renewed to (the queue's lock duration is renewed, but a
// receiver that cannot reach the service loses it) is delivered to another
// receiver, which the grid answers as usual; a handler failing on every
// attempt spends one delivery per hold, so MaxDeliveryCount times
// WithRetryHold bounds how long it is retried before Service Bus
// dead-letters it (unless the grid poisons the key first). WithRetryHold(0)
// abandons at once, as before: each retry spends a delivery.
//
// WithRetryScheduler takes the delay out of the receiver instead: a copy
// of the message is scheduled on the sender at the retry-after, and the
// message is completed. The copy carries the message's body and the
// properties a sender can set (ApplicationProperties, ContentType,
// CorrelationID, PartitionKey, ReplyTo, ReplyToSessionID, SessionID,
// Subject, TimeToLive, which counts again from the copy's enqueueing, and
// To), under a new MessageID: the original's with "/retry-<n>" added (n
// counts the copies; an id that would pass Service Bus's 128 characters is
// replaced by a hash of the original's), so the queue's duplicate detection
// does not drop it as a resend of the original, and a crash between the
// schedule and the completion schedules the same id again, which duplicate
// detection does drop. The copy also carries the original MessageID in the
// "grid-retry-of" property and n in "grid-retry"; the key rule, WithFingerprint
// and WithEntity see the copy with its MessageID set back to the original's,
// so the grid sees the same key for the copy as for the original, while the
// handler sees the copy as received. What this risks: what a sender cannot
// set (SequenceNumber, EnqueuedTime, DeliveryCount) is the copy's own, so
// a key rule must not read it; the copy joins the back of the queue (and of
// its session); and a schedule that fails abandons the message instead.
//
// # Keys
//
// The key is the "idempotency-key" application property when the message
// has one (a string), else its MessageID, which the producer sets (with
// duplicate detection on the queue, Service Bus also drops a resend within
// its window). WithKey replaces the rule. A retry's copy (WithRetryScheduler)
// is seen by the rule with the original's MessageID.
package servicebus

import (
	"context"
	"crypto/sha256"
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

// The application properties of a retry's copy (WithRetryScheduler): the
// original MessageID, and how many copies lead back to it (an int64).
const (
	RetryOfProperty = "grid-retry-of"
	RetryProperty   = "grid-retry"
)

// maxMessageIDLen is the longest MessageID Service Bus takes.
const maxMessageIDLen = 128

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
	retryHold   time.Duration
	registerer  prometheus.Registerer
	logger      *slog.Logger
}

// WithBatch sets how many messages run (or are kept for a retry) at once:
// a receive asks for as many as there are free slots. Default 32.
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

// WithRetryScheduler delays retries: a copy of the message, under a new
// MessageID derived from the original's, is scheduled on s (a sender for
// the same queue or topic) at the retry-after, and the message is
// completed (see Retries in the package documentation). Without it a
// retry keeps the message for up to WithRetryHold.
func WithRetryScheduler(s Scheduler) Option { return func(c *config) { c.scheduler = s } }

// WithRetryHold sets how long, from its first retry, a message is kept
// locked and run again in place without a scheduler (see Retries in the
// package documentation) before it is abandoned, which spends one of its
// deliveries. 0 abandons it at once. Default 30s (client.DefaultLease).
// Ignored with WithRetryScheduler.
func WithRetryHold(d time.Duration) Option { return func(c *config) { c.retryHold = d } }

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
	cfg := config{batch: 32, key: DefaultKey, delays: adapter.DefaultDelays(), retryHold: client.DefaultLease}
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
	case cfg.retryHold < 0:
		return fmt.Errorf("servicebus: retry hold %v, want at least 0", cfg.retryHold)
	}
	m, err := adapter.NewMetrics("servicebus", cfg.registerer)
	if err != nil {
		return err
	}
	r := &receiver{cfg: cfg, rcv: rcv, grid: grid, ns: ns, h: h, m: m, iso: client.NewIsolation()}
	// A token in slots per message received and not yet settled: a message
	// kept for a retry holds its slot, and the others go on receiving.
	slots := make(chan struct{}, cfg.batch)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
	fill:
		for free < cfg.batch {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break fill
			}
		}
		msgs, err := rcv.ReceiveMessages(ctx, free, nil)
		for range max(free-len(msgs), 0) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("servicebus: receive: %w", err)
		}
		for i, msg := range msgs {
			wg.Go(func() {
				if i < free { // a receiver that returned more than asked: the rest took no slot
					defer func() { <-slots }()
				}
				r.handle(ctx, msg)
			})
		}
	}
}

type receiver struct {
	cfg  config
	rcv  Receiver
	grid *client.Client
	ns   string
	h    Handler
	m    *adapter.Metrics
	iso  *client.Isolation // keeps a crash loop's culprit apart
}

// handle processes msg and settles it.
func (r *receiver) handle(ctx context.Context, msg *azservicebus.ReceivedMessage) {
	if ctx.Err() != nil {
		r.settle(ctx, msg, adapter.Verdict{Outcome: adapter.NotStarted, Action: adapter.Requeue})
		return
	}
	orig := original(msg)
	key, err := r.cfg.key(orig)
	if err != nil {
		r.settle(ctx, msg, adapter.Verdict{Outcome: adapter.NoKey, Action: adapter.DeadLetter, Cause: err})
		return
	}
	popts := adapter.ProcessOptions(r.cfg.process, r.iso, msg.DeliveryCount > 1, orig, r.cfg.fingerprint, r.cfg.entity)
	var holdEnd time.Time // when a kept message is abandoned; zero before its first retry
	for {
		v := r.process(ctx, msg, key, popts)
		if v.Action != adapter.Retry || r.cfg.scheduler != nil {
			r.settle(ctx, msg, v)
			return
		}
		now := time.Now()
		if holdEnd.IsZero() {
			holdEnd = now.Add(r.cfg.retryHold)
		}
		left := holdEnd.Sub(now)
		if left <= 0 {
			r.settle(ctx, msg, v) // kept long enough: abandon it, one delivery
			return
		}
		if !r.keep(ctx, msg, v, min(max(v.Delay, 10*time.Millisecond), left)) {
			r.settle(ctx, msg, adapter.Verdict{Outcome: adapter.NotStarted, Action: adapter.Requeue, Cause: ctx.Err()})
			return
		}
	}
}

// process runs msg through the grid once, under key, and judges the
// outcome.
func (r *receiver) process(ctx context.Context, msg *azservicebus.ReceivedMessage, key string, popts []client.ProcessOption) adapter.Verdict {
	corr := ""
	if msg.CorrelationID != nil {
		corr = *msg.CorrelationID
	}
	dctx, dcancel := adapter.Draining(ctx, r.cfg.delays.StopGrace)
	defer dcancel()
	// Keep msg locked while it is here: waiting for its turn (a message
	// taken over from a crashed holder runs alone, client.Isolation), its
	// Reserve, its handler. A lost lock is a delivery spent.
	stop := r.renewLock(dctx, msg)
	defer stop()
	hctx := client.ContextWithCorrelationID(dctx, corr)
	out, err := r.grid.Process(hctx, r.ns, key, func(ctx context.Context, l client.Lease) ([]byte, error) {
		return r.h(ctx, msg, l)
	}, popts...)
	return adapter.Judge(ctx, out, err, r.cfg.delays)
}

// keep keeps msg, whose verdict v is a retry, locked for wait, renewing
// its lock, so that it is run again without spending a delivery. It counts
// the wait as a retry and reports false when ctx ends first.
func (r *receiver) keep(ctx context.Context, msg *azservicebus.ReceivedMessage, v adapter.Verdict, wait time.Duration) bool {
	r.m.Count(v.Outcome, adapter.Retry)
	if r.cfg.logger != nil {
		r.cfg.logger.Info("servicebus: message kept for a retry", "message_id", msg.MessageID, "outcome", v.Outcome,
			"wait", wait, "cause", v.Cause)
	}
	stop := r.renewLock(ctx, msg)
	defer stop()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// original is msg as its key rule, fingerprint and entity see it: a
// retry's copy (RetryOfProperty) with the original's MessageID, any other
// message as it is.
func original(msg *azservicebus.ReceivedMessage) *azservicebus.ReceivedMessage {
	id, ok := msg.ApplicationProperties[RetryOfProperty].(string)
	if !ok || id == "" || id == msg.MessageID {
		return msg
	}
	o := *msg
	o.MessageID = id
	return &o
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

// copyOf is the retry's copy of msg: what a sender can set of what msg
// carried, under a MessageID of its own (retryID) that duplicate detection
// does not take for a resend of msg, with the original MessageID and the
// copy's number in its properties.
func copyOf(msg *azservicebus.ReceivedMessage) *azservicebus.Message {
	props := make(map[string]any, len(msg.ApplicationProperties)+2)
	for k, v := range msg.ApplicationProperties {
		props[k] = v
	}
	c := &azservicebus.Message{
		Body: msg.Body, ApplicationProperties: props, ContentType: msg.ContentType,
		CorrelationID: msg.CorrelationID, PartitionKey: msg.PartitionKey, ReplyTo: msg.ReplyTo,
		ReplyToSessionID: msg.ReplyToSessionID, SessionID: msg.SessionID, Subject: msg.Subject,
		TimeToLive: msg.TimeToLive, To: msg.To,
	}
	orig := original(msg).MessageID
	if orig == "" {
		return c // no id to derive from: Service Bus gives the copy one
	}
	n := retryNumber(msg.ApplicationProperties[RetryProperty]) + 1
	id := retryID(orig, n)
	c.MessageID = &id
	props[RetryOfProperty], props[RetryProperty] = orig, n
	return c
}

// retryNumber is the number of a copy's RetryProperty, 0 for none.
func retryNumber(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int:
		return int64(n)
	}
	return 0
}

// retryID is the MessageID of the n-th retry's copy of the message whose
// MessageID is orig: orig + "/retry-<n>", or, past Service Bus's 128
// characters, a hash of orig in its place.
func retryID(orig string, n int64) string {
	suffix := fmt.Sprintf("/retry-%d", n)
	if len(orig)+len(suffix) <= maxMessageIDLen {
		return orig + suffix
	}
	sum := sha256.Sum256([]byte(orig))
	return fmt.Sprintf("%x%s", sum[:], suffix)
}
