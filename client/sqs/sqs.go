// Package sqs runs the grid's idempotent receiver on an Amazon SQS queue,
// over the AWS SDK's client (github.com/aws/aws-sdk-go-v2/service/sqs):
// every message of a receive goes through client.Process, and its outcome
// becomes what SQS understands.
//
//	err := sqs.Consume(ctx, sqsClient, queueURL, grid, "payments", handle)
//
// # Outcomes
//
//	the handler succeeded (COMPLETED)        deleted (DeleteMessageBatch for the receive)
//	DUPLICATE, STALE                         deleted: handled before
//	the handler failed, retryably (FAILED)   ChangeMessageVisibility(the grid's retry-after):
//	BUSY (another consumer holds the key)    SQS delivers it again then (BUSY at most
//	the grid unreachable, a lease lost       WithBusyDelay, errors after WithErrorDelay)
//	POISONED, MISMATCH, no key               sent to WithDeadLetterQueue with the reason, then
//	                                         deleted; or, with WithRedrivePolicy, left to the
//	                                         queue's redrive policy (visible again at once).
//	                                         Consume requires one of the two: it never deletes
//	                                         a dead letter unkept
//	shutdown (ctx ended)                     running handlers finish within WithStopGrace and
//	                                         settle as above; one cancelled past it: the key
//	                                         is failed (attempt counted), visibility 0
//
// A receive of up to 10 messages runs them at once (the grid client batches
// their Reserves), and the deletes of one receive go in one
// DeleteMessageBatch; its per-message failures are counted and logged (the
// message then comes back and answers DUPLICATE). From its receipt until
// it is settled (deleted, or made visible again at its retry delay), each
// message's visibility timeout is extended every third of WithVisibility:
// while its Reserve and its handler run, and while the other messages of
// its receive finish.
//
// # Keys
//
// The key is the "idempotency-key" message attribute when the message has
// one, else the message id. SQS gives every send its own id, so the id
// catches SQS's redeliveries only, not a producer that sent twice: give
// such messages the attribute (a FIFO queue's deduplication id is a good
// value). WithKey replaces the rule.
package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/prometheus/client_golang/prometheus"
)

// API is what Consume needs of *sqs.Client.
type API interface {
	ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput, optFns ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error)
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
}

var _ API = (*awssqs.Client)(nil)

// KeyAttribute is the message attribute that carries a message's
// idempotency key; ReasonAttribute says why a dead letter was set aside.
const (
	KeyAttribute    = "idempotency-key"
	ReasonAttribute = "grid-reason"
)

// maxVisibility is SQS's longest visibility timeout.
const maxVisibility = 12 * time.Hour

// Handler processes one message under the grid's lease. ctx carries the
// message's "correlation-id" attribute (client.CorrelationID) and ends when
// the lease is lost, or when Consume stops and its stop grace
// (WithStopGrace) has run out.
type Handler func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error)

// Option configures Consume.
type Option func(*config)

type config struct {
	batch       int32
	wait        time.Duration
	visibility  time.Duration
	key         func(types.Message) (string, error)
	process     []client.ProcessOption
	fingerprint func(types.Message) uint64
	entity      func(types.Message) (entity string, version uint64, ok bool)
	delays      adapter.Delays
	deadLetter  string
	redrive     bool
	registerer  prometheus.Registerer
	logger      *slog.Logger
}

// WithBatch sets how many messages a receive asks for (1 to 10). Default 10.
func WithBatch(n int) Option { return func(c *config) { c.batch = int32(n) } }

// WithWait sets the long-poll wait of a receive (at most 20s). Default 20s.
func WithWait(d time.Duration) Option { return func(c *config) { c.wait = d } }

// WithVisibility sets the visibility timeout of received messages, and how
// far each extension moves it while a handler runs. Default 30s.
func WithVisibility(d time.Duration) Option { return func(c *config) { c.visibility = d } }

// WithKey sets how a message's idempotency key is found. An error
// dead-letters the message.
func WithKey(f func(types.Message) (string, error)) Option { return func(c *config) { c.key = f } }

// WithFingerprint sets a fingerprint of the payload: the same key with
// another fingerprint answers MISMATCH, and the message is dead-lettered.
func WithFingerprint(f func(types.Message) uint64) Option {
	return func(c *config) { c.fingerprint = f }
}

// WithEntity names the entity a message changes and its version, when it
// has them (ok): a version not newer than the entity's last completed one
// answers STALE, and the message is deleted without running the handler.
func WithEntity(f func(types.Message) (entity string, version uint64, ok bool)) Option {
	return func(c *config) { c.entity = f }
}

// WithProcessOptions passes options to every client.Process call.
func WithProcessOptions(opts ...client.ProcessOption) Option {
	return func(c *config) { c.process = append(c.process, opts...) }
}

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

// WithDeadLetterQueue sends dead letters to the queue at url, with the
// reason in the "grid-reason" attribute, before deleting them.
func WithDeadLetterQueue(url string) Option { return func(c *config) { c.deadLetter = url } }

// WithRedrivePolicy leaves dead letters to the queue's redrive policy: they
// are made visible again at once, and SQS moves them to its dead-letter
// queue after maxReceiveCount receives.
func WithRedrivePolicy() Option { return func(c *config) { c.redrive = true } }

// WithRegisterer registers the adapter's metrics:
// l4xg_grid_adapter_messages_total{adapter="sqs",outcome,action}.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }

// WithLogger logs what the adapter does to a message besides deleting it.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// DefaultKey is the default key rule: the "idempotency-key" attribute, else
// the message id.
func DefaultKey(msg types.Message) (string, error) {
	if v := attribute(msg, KeyAttribute); v != "" {
		return v, nil
	}
	if id := aws.ToString(msg.MessageId); id != "" {
		return id, nil
	}
	return "", errors.New("sqs: the message has neither an idempotency-key attribute nor an id")
}

// receiveCount is the message's ApproximateReceiveCount (0 when not given).
func receiveCount(msg types.Message) int {
	n, _ := strconv.Atoi(msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	return n
}

func attribute(msg types.Message, name string) string {
	if a, ok := msg.MessageAttributes[name]; ok {
		return aws.ToString(a.StringValue)
	}
	return ""
}

// Consume receives from the queue at url, runs h for each message through
// grid.Process in namespace ns, and settles each by the outcome (see the
// package documentation). It returns nil once ctx has ended and every
// message it received is settled, or the error of a receive that failed.
func Consume(ctx context.Context, api API, url string, grid *client.Client, ns string, h Handler, opts ...Option) error {
	cfg := config{batch: 10, wait: 20 * time.Second, visibility: 30 * time.Second, key: DefaultKey, delays: adapter.DefaultDelays()}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case api == nil || grid == nil || h == nil || url == "":
		return errors.New("sqs: Consume needs a client, a queue URL, a grid client and a handler")
	case cfg.batch < 1 || cfg.batch > 10:
		return fmt.Errorf("sqs: batch %d is outside 1..10", cfg.batch)
	case cfg.wait < 0 || cfg.wait > 20*time.Second:
		return fmt.Errorf("sqs: wait %v is outside 0..20s", cfg.wait)
	case cfg.visibility < time.Second || cfg.visibility > maxVisibility:
		return fmt.Errorf("sqs: visibility %v is outside 1s..12h", cfg.visibility)
	case cfg.key == nil:
		return errors.New("sqs: nil key rule")
	case cfg.delays.Error <= 0 || cfg.delays.Busy <= 0:
		return fmt.Errorf("sqs: error delay %v and busy delay %v, want both more than 0", cfg.delays.Error, cfg.delays.Busy)
	case cfg.deadLetter != "" && cfg.redrive:
		return errors.New("sqs: WithDeadLetterQueue and WithRedrivePolicy are exclusive")
	case cfg.deadLetter == "" && !cfg.redrive:
		return errors.New("sqs: no dead-letter target: give WithDeadLetterQueue(url), or WithRedrivePolicy() for a queue whose redrive policy has one; without either, poisoned, mismatched and keyless messages would be deleted and lost")
	}
	m, err := adapter.NewMetrics("sqs", cfg.registerer)
	if err != nil {
		return err
	}
	r := &receiver{cfg: cfg, api: api, url: url, grid: grid, ns: ns, h: h, m: m, iso: client.NewIsolation()}
	for ctx.Err() == nil {
		out, err := api.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: cfg.batch, WaitTimeSeconds: int32(cfg.wait / time.Second),
			VisibilityTimeout: int32(cfg.visibility / time.Second), MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("sqs: receive: %w", err)
		}
		r.settleBatch(ctx, out.Messages)
	}
	return nil
}

type receiver struct {
	cfg  config
	api  API
	url  string
	grid *client.Client
	ns   string
	h    Handler
	m    *adapter.Metrics
	iso  *client.Isolation // keeps a crash loop's culprit apart
}

// settleBatch runs a receive's messages at once and deletes those settled
// as done in one DeleteMessageBatch. Each message is kept invisible from
// its receipt until it is settled, not only while its handler runs: one
// whose handler ended early does not come back while the slowest of its
// receive still runs, and its Reserve and its waits for the grid are
// covered too.
func (r *receiver) settleBatch(ctx context.Context, msgs []types.Message) {
	kctx := context.WithoutCancel(ctx) // kept through the stop grace, until settled
	keep := make([]func(), len(msgs))
	for i, msg := range msgs {
		keep[i] = r.extend(kctx, msg)
	}
	defer func() {
		for _, stop := range keep {
			stop()
		}
	}()
	verdicts := make([]adapter.Verdict, len(msgs))
	var wg sync.WaitGroup
	for i, msg := range msgs {
		wg.Go(func() { verdicts[i] = r.handle(ctx, msg) })
	}
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var del []types.DeleteMessageBatchRequestEntry
	for i, msg := range msgs {
		v := verdicts[i]
		action, err := v.Action, error(nil)
		if v.Action != adapter.Ack {
			keep[i]() // its visibility is set below; an acked one stays hidden until deleted
		}
		switch v.Action {
		case adapter.Ack:
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: msg.ReceiptHandle})
		case adapter.DeadLetter:
			switch {
			case r.cfg.redrive:
				err = r.visible(sctx, msg, 0)
			default: // WithDeadLetterQueue (Consume requires one of the two)
				if err = r.sendDeadLetter(sctx, msg, v); err == nil {
					del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: msg.ReceiptHandle})
				} else {
					action = adapter.Retry
					err = errors.Join(err, r.visible(sctx, msg, r.cfg.delays.Error))
				}
			}
		case adapter.Retry:
			err = r.visible(sctx, msg, v.Delay)
		case adapter.Requeue:
			err = r.visible(sctx, msg, 0)
		}
		r.m.Count(v.Outcome, action)
		r.log(msg, v, action, err)
	}
	if len(del) == 0 {
		return
	}
	out, err := r.api.DeleteMessageBatch(sctx, &awssqs.DeleteMessageBatchInput{QueueUrl: &r.url, Entries: del})
	if err != nil {
		r.logErr("sqs: delete batch failed; the messages come back and answer DUPLICATE", err)
		return
	}
	for _, f := range out.Failed {
		r.logErr("sqs: delete failed; the message comes back and answers DUPLICATE",
			fmt.Errorf("entry %s: %s: %s", aws.ToString(f.Id), aws.ToString(f.Code), aws.ToString(f.Message)))
	}
}

// handle runs one message through the grid and judges the outcome.
func (r *receiver) handle(ctx context.Context, msg types.Message) adapter.Verdict {
	if ctx.Err() != nil {
		return adapter.Verdict{Outcome: adapter.NotStarted, Action: adapter.Requeue}
	}
	key, err := r.cfg.key(msg)
	if err != nil {
		return adapter.Verdict{Outcome: adapter.NoKey, Action: adapter.DeadLetter, Cause: err}
	}
	popts := adapter.ProcessOptions(r.cfg.process, r.iso, receiveCount(msg) > 1, msg, r.cfg.fingerprint, r.cfg.entity)
	dctx, dcancel := adapter.Draining(ctx, r.cfg.delays.StopGrace)
	defer dcancel()
	hctx := client.ContextWithCorrelationID(dctx, attribute(msg, "correlation-id"))
	out, err := r.grid.Process(hctx, r.ns, key, func(ctx context.Context, l client.Lease) ([]byte, error) {
		return r.h(ctx, msg, l)
	}, popts...)
	return adapter.Judge(ctx, out, err, r.cfg.delays)
}

// extend moves msg's visibility timeout on by WithVisibility, every third
// of it, until stop is called.
func (r *receiver) extend(ctx context.Context, msg types.Message) (stop func()) {
	return adapter.KeepAlive(ctx, func() time.Duration { return r.cfg.visibility / 3 },
		func(ctx context.Context) { _ = r.visible(ctx, msg, r.cfg.visibility) })
}

// visible makes msg visible again after d (whole seconds, at most 12h).
func (r *receiver) visible(ctx context.Context, msg types.Message, d time.Duration) error {
	secs := int32(min((d+time.Second-1)/time.Second, maxVisibility/time.Second))
	_, err := r.api.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: &r.url, ReceiptHandle: msg.ReceiptHandle, VisibilityTimeout: secs,
	})
	return err
}

// sendDeadLetter sends a copy of msg, with the reason, to the dead-letter
// queue.
func (r *receiver) sendDeadLetter(ctx context.Context, msg types.Message, v adapter.Verdict) error {
	reason := string(v.Outcome)
	if v.Cause != nil {
		reason += ": " + v.Cause.Error()
	}
	attrs := map[string]types.MessageAttributeValue{}
	for k, a := range msg.MessageAttributes {
		attrs[k] = a
	}
	attrs[ReasonAttribute] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(reason)}
	_, err := r.api.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: &r.cfg.deadLetter, MessageBody: msg.Body, MessageAttributes: attrs})
	if err != nil {
		return fmt.Errorf("sqs: dead letter to %s: %w", r.cfg.deadLetter, err)
	}
	return nil
}

func (r *receiver) log(msg types.Message, v adapter.Verdict, action adapter.Action, err error) {
	if r.cfg.logger != nil && (action != adapter.Ack || v.Cause != nil || err != nil) {
		r.cfg.logger.Info("sqs: message settled", "message_id", aws.ToString(msg.MessageId), "outcome", v.Outcome,
			"action", action, "delay", v.Delay, "cause", v.Cause, "error", err)
	}
}

func (r *receiver) logErr(msg string, err error) {
	if r.cfg.logger != nil {
		r.cfg.logger.Warn(msg, "error", err)
	}
}
