// Package rabbitmq runs the grid's idempotent receiver on a RabbitMQ queue,
// over the broker's own Go client (github.com/rabbitmq/amqp091-go): every
// delivery goes through client.Process, and its outcome becomes what
// RabbitMQ understands.
//
//	err := rabbitmq.Consume(ctx, conn, grid, "payments", "payments", handle)
//
// # Outcomes
//
//	the handler succeeded (COMPLETED)        ack
//	DUPLICATE, STALE                         ack: the message was handled before
//	the handler failed, retryably (FAILED)   ack, and a copy waits in a retry queue for the
//	                                         grid's retry-after, then goes back to the queue
//	BUSY (another consumer holds the key)    the same, for the holder's retry-after, at most
//	                                         WithBusyDelay (1s): holders settle early
//	POISONED, MISMATCH, no key               ack, once a copy waits in the dead-letter queue
//	                                         "<queue>.dlq" (or WithDeadLetter's target) with
//	                                         the reason in its "x-grid-reason" header
//	shutdown (ctx ended)                     running handlers finish within WithStopGrace and
//	                                         settle as above; one cancelled past it: the key
//	                                         is failed (attempt counted), Nack(requeue=true);
//	                                         one not started: Nack(requeue=true)
//	the grid unreachable, a lease lost       a copy to the retry queue after WithErrorDelay
//
// A plain Nack(requeue=true) would redeliver at once, in a loop, so delays
// go through retry queues that the adapter declares: "<queue>.retry.<delay>"
// for each of WithRetryDelays (1s, 5s, 30s, 2m, 10m, 1h by default), each
// with that message TTL and the queue as its dead-letter route. A delay is
// rounded up to the next of them, so one queue's messages all expire in
// order. The copy is published with publisher confirms and the original is
// acked only once the broker has confirmed the copy: a failure between the
// two redelivers the original, never loses it.
//
// # Nothing is dropped
//
// Every copy (to a retry queue or a dead-letter queue) is published
// mandatory: a copy that no queue takes (a retry queue deleted after
// Consume started, a dead-letter queue that does not exist) comes back as a
// basic.return, which counts as a failed copy. A failed copy leaves its
// original unacked: it goes back to its queue after WithErrorDelay, to be
// tried again, and a warning is logged. Each copy carries an
// "x-grid-publish-id" header, by which a return is matched to its publish.
//
// Dead letters go to "<queue>.dlq" by default, which Consume declares
// (durable, no arguments) unless a queue of that name exists already, so a
// queue declared without a dead-letter exchange (as in the example above)
// keeps its poisoned messages. WithDeadLetter sends them to an exchange of
// yours instead. WithNackDeadLetter leaves them to the queue's own
// dead-letter exchange with Nack(requeue=false), which RabbitMQ drops when
// the queue has none; each such nack is logged as a warning.
//
// # Keys
//
// The key is the "idempotency-key" header when the message has one (a
// string), else its MessageId; WithKey replaces the rule. A message id set
// by the producer catches its retries and the broker's redeliveries; it
// does not catch a producer that sends the same business event twice with
// two ids: give such messages a key derived from the event. A message
// without a key cannot be deduplicated and is dead-lettered.
//
// # Concurrency and shutdown
//
// Consume sets the channel's prefetch (WithPrefetch, 32) and runs as many
// deliveries at once; the grid client batches their Reserves. When ctx
// ends, Consume cancels the consumer, hands back the deliveries it has not
// started, lets the handlers in flight see their context end (Process then
// releases their keys) and returns nil once every delivery is settled.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
)

// KeyHeader is the header that carries a message's idempotency key.
const KeyHeader = "idempotency-key"

// Handler processes one delivery under the grid's lease. ctx carries the
// message's correlation id (client.CorrelationID) and ends when the lease
// is lost, or when Consume stops and its stop grace (WithStopGrace) has run
// out. The returned bytes are stored as the key's
// result; wrap an error with client.RetryAfter or client.Poison to choose
// what happens to the message.
type Handler func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error)

// Option configures Consume.
type Option func(*config)

type config struct {
	prefetch    int
	key         func(amqp.Delivery) (string, error)
	process     []client.ProcessOption
	fingerprint func(amqp.Delivery) uint64
	entity      func(amqp.Delivery) (entity string, version uint64, ok bool)
	delays      []time.Duration
	waits       adapter.Delays
	deadLetter  *deadLetter
	nackDead    bool
	declare     bool
	registerer  prometheus.Registerer
	logger      *slog.Logger
	consumerTag string
}

type deadLetter struct{ exchange, key string }

// WithPrefetch sets how many unacked deliveries the broker sends at once,
// which is also how many run at once. Default 32.
func WithPrefetch(n int) Option { return func(c *config) { c.prefetch = n } }

// WithKey sets how a delivery's idempotency key is found. An error
// dead-letters the message.
func WithKey(f func(amqp.Delivery) (string, error)) Option { return func(c *config) { c.key = f } }

// WithFingerprint sets a fingerprint of the payload: the same key with
// another fingerprint answers MISMATCH (the key was reused for another
// message), and the message is dead-lettered.
func WithFingerprint(f func(amqp.Delivery) uint64) Option {
	return func(c *config) { c.fingerprint = f }
}

// WithEntity names the entity a message changes and its version, when it
// has them (ok): a version not newer than the entity's last completed one
// answers STALE, and the message is acked without running the handler.
func WithEntity(f func(amqp.Delivery) (entity string, version uint64, ok bool)) Option {
	return func(c *config) { c.entity = f }
}

// WithProcessOptions passes options to every client.Process call: the
// lease (client.WithLease), attempts before poisoning, the retention of
// completed keys, an entity.
func WithProcessOptions(opts ...client.ProcessOption) Option {
	return func(c *config) { c.process = append(c.process, opts...) }
}

// WithRetryDelays sets the delays of the retry queues, each at least 1 ms.
func WithRetryDelays(d ...time.Duration) Option { return func(c *config) { c.delays = d } }

// WithErrorDelay sets how long a message waits before it is tried again
// when the grid could not be asked or the lease was lost. Default 1s.
func WithErrorDelay(d time.Duration) Option { return func(c *config) { c.waits.Error = d } }

// WithStopGrace sets how long a stopping Consume (its ctx ended) lets the
// handlers it started finish and settle before it cancels them (default
// 10 s). A handler cancelled mid-way may have applied its effect, so its
// key is failed, the attempt counted, not released: give handlers the
// time their effect takes. 0 cancels them at once.
func WithStopGrace(d time.Duration) Option { return func(c *config) { c.waits.StopGrace = d } }

// WithBusyDelay caps how long a message waits after BUSY (another consumer
// holds the key) before it is tried again. The grid answers with the
// holder's whole lease; a holder usually settles long before. Default 1s.
func WithBusyDelay(d time.Duration) Option { return func(c *config) { c.waits.Busy = d } }

// WithDeadLetter publishes dead-lettered messages to exchange with routing
// key, instead of to the queue "<queue>.dlq", with an "x-grid-reason"
// header saying why, and acks them once the broker has confirmed the copy
// and no queue returned it. The exchange must exist when Consume starts.
func WithDeadLetter(exchange, routingKey string) Option {
	return func(c *config) { c.deadLetter = &deadLetter{exchange, routingKey} }
}

// WithNackDeadLetter dead-letters messages with Nack(requeue=false), to the
// dead-letter exchange the queue was declared with (its
// x-dead-letter-exchange argument or a policy), for queues that route their
// dead letters themselves. RabbitMQ drops the message when the queue has
// none, which the adapter cannot see: every such nack is logged as a
// warning. It excludes WithDeadLetter.
func WithNackDeadLetter() Option { return func(c *config) { c.nackDead = true } }

// WithoutDeclare leaves the retry queues and the dead-letter queue to the
// operator: Consume does not declare them, and they must exist.
func WithoutDeclare() Option { return func(c *config) { c.declare = false } }

// WithRegisterer registers the adapter's metrics:
// l4xg_grid_adapter_messages_total{adapter="rabbitmq",outcome,action}.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }

// WithLogger logs what the adapter does to a message besides acking it, at
// info, and at warn what puts a message at risk: a copy the broker did not
// take (the message goes back to its queue), a dead letter left to the
// queue's dead-letter exchange (WithNackDeadLetter). Default: the warnings
// only, to slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithConsumerTag names the consumer (default: "l4xg-grid-<queue>-<random>").
func WithConsumerTag(tag string) Option { return func(c *config) { c.consumerTag = tag } }

// DefaultRetryDelays are the retry queues' delays.
func DefaultRetryDelays() []time.Duration {
	return []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}
}

// KeyFromHeaderOrID is the default key rule: the "idempotency-key" header,
// else the message id.
func KeyFromHeaderOrID(d amqp.Delivery) (string, error) {
	if v, ok := d.Headers[KeyHeader]; ok {
		if s, ok := v.(string); ok && s != "" {
			return s, nil
		}
		return "", fmt.Errorf("rabbitmq: header %s is %T, not a non-empty string", KeyHeader, v)
	}
	if d.MessageId != "" {
		return d.MessageId, nil
	}
	return "", fmt.Errorf("rabbitmq: the message has neither an %s header nor a message id", KeyHeader)
}

// RetryQueue is the name of queue's retry queue for delay.
func RetryQueue(queue string, delay time.Duration) string {
	return queue + ".retry." + delay.String()
}

// DeadLetterQueue is the name of queue's default dead-letter queue.
func DeadLetterQueue(queue string) string { return queue + ".dlq" }

// Consume consumes queue on a channel of its own from conn, runs h for each
// delivery through grid.Process in namespace ns, and settles the delivery
// by the outcome (see the package documentation). It returns nil once ctx
// has ended and every delivery it took is settled, or an error when the
// channel fails or the setup is refused.
func Consume(ctx context.Context, conn *amqp.Connection, grid *client.Client, ns, queue string, h Handler, opts ...Option) error {
	cfg := config{prefetch: 32, key: KeyFromHeaderOrID, delays: DefaultRetryDelays(), waits: adapter.DefaultDelays(), declare: true}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.consumerTag == "" {
		// Cancel needs the tag, so make one rather than let the broker.
		cfg.consumerTag = fmt.Sprintf("l4xg-grid-%s-%x", queue, rand.Uint64())
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	ownDLQ := cfg.deadLetter == nil && !cfg.nackDead
	if ownDLQ {
		cfg.deadLetter = &deadLetter{"", DeadLetterQueue(queue)}
	}
	if h == nil || grid == nil || conn == nil {
		return errors.New("rabbitmq: Consume needs a connection, a grid client and a handler")
	}
	slices.Sort(cfg.delays)
	m, err := adapter.NewMetrics("rabbitmq", cfg.registerer)
	if err != nil {
		return err
	}
	pub, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: open the publishing channel: %w", err)
	}
	defer pub.Close()
	if err := pub.Confirm(false); err != nil {
		return fmt.Errorf("rabbitmq: publisher confirms: %w", err)
	}
	returns := newReturns(pub.NotifyReturn(make(chan amqp.Return, cfg.prefetch)))
	defer returns.stop()
	if err := declare(conn, pub, queue, cfg, ownDLQ); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: open the consuming channel: %w", err)
	}
	defer ch.Close()
	if err := ch.Qos(cfg.prefetch, 0, false); err != nil {
		return fmt.Errorf("rabbitmq: prefetch: %w", err)
	}
	deliveries, err := ch.Consume(queue, cfg.consumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: consume %s: %w", queue, err)
	}
	r := &receiver{cfg: cfg, grid: grid, ns: ns, queue: queue, h: h, pub: pub, returns: returns, m: m, iso: client.NewIsolation()}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 1))
	// Without its publishing channel the consumer can settle nothing but
	// acks (every retry or dead-letter copy would fail and its message
	// come back, for ever): when the broker closes it, the consuming
	// channel is closed too (the broker hands the unacked deliveries back)
	// and Consume returns the error, for its caller to reconnect.
	pubClosed := pub.NotifyClose(make(chan *amqp.Error, 1))
	pubErr := make(chan error, 1)
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		select {
		case err, ok := <-pubClosed:
			if ok && err != nil {
				pubErr <- err
				_ = ch.Close()
			}
		case <-watchDone:
		}
	}()
	// When ctx ends, stop the broker's deliveries; those already sent still
	// arrive, and the workers hand them back.
	defer context.AfterFunc(ctx, func() { _ = ch.Cancel(cfg.consumerTag, false) })()
	var wg sync.WaitGroup
	for range cfg.prefetch {
		wg.Go(func() {
			for d := range deliveries {
				r.handle(ctx, d)
			}
		})
	}
	wg.Wait()
	select {
	case err := <-pubErr:
		return fmt.Errorf("rabbitmq: the publishing channel closed: %w", err)
	default:
	}
	if ctx.Err() != nil {
		return nil
	}
	select {
	case err := <-closed:
		return fmt.Errorf("rabbitmq: channel closed: %w", err)
	case <-cancelled:
		return fmt.Errorf("rabbitmq: the broker cancelled the consumer of %s", queue)
	}
}

// declare declares the retry queues and, when ownDLQ, the dead-letter
// queue "<queue>.dlq", or with WithoutDeclare checks that they exist, and
// checks that WithDeadLetter's exchange exists. A copy that nothing routes
// would come back, and its original with it, again and again: better
// refused at the start.
func declare(conn *amqp.Connection, pub *amqp.Channel, queue string, cfg config, ownDLQ bool) error {
	for _, d := range cfg.delays {
		name := RetryQueue(queue, d)
		if cfg.declare {
			if _, err := pub.QueueDeclare(name, true, false, false, false, amqp.Table{
				"x-message-ttl":             d.Milliseconds(),
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": queue,
			}); err != nil {
				return fmt.Errorf("rabbitmq: declare retry queue %s: %w", name, err)
			}
			continue
		}
		if err := passive(conn, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			return err
		}); err != nil {
			return fmt.Errorf("rabbitmq: retry queue %s: %w", name, err)
		}
	}
	if ownDLQ {
		if err := declareDLQ(conn, pub, DeadLetterQueue(queue), cfg.declare); err != nil {
			return err
		}
	}
	if dl := cfg.deadLetter; dl != nil && dl.exchange != "" {
		if err := passive(conn, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(dl.exchange, "", true, false, false, false, nil)
		}); err != nil {
			return fmt.Errorf("rabbitmq: dead-letter exchange %s: %w", dl.exchange, err)
		}
	}
	return nil
}

// declareDLQ declares the dead-letter queue name unless a queue of that
// name exists: one the operator declared, with arguments of their choice
// (a quorum queue, a length limit), is used as it is, where declaring it
// again with other arguments would be refused. With create false it must
// exist.
func declareDLQ(conn *amqp.Connection, pub *amqp.Channel, name string, create bool) error {
	err := passive(conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		return err
	})
	var aerr *amqp.Error
	if err == nil || !create || !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
		if err != nil {
			return fmt.Errorf("rabbitmq: dead-letter queue %s: %w", name, err)
		}
		return nil
	}
	if _, err := pub.QueueDeclare(name, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare dead-letter queue %s: %w", name, err)
	}
	return nil
}

// passive runs a passive declaration on a channel of its own: a missing
// queue or exchange closes the channel it was asked on.
func passive(conn *amqp.Connection, f func(*amqp.Channel) error) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return f(ch)
}

func (c *config) validate() error {
	switch {
	case c.prefetch < 1:
		return fmt.Errorf("rabbitmq: prefetch %d, want at least 1", c.prefetch)
	case c.key == nil:
		return errors.New("rabbitmq: nil key rule")
	case c.nackDead && c.deadLetter != nil:
		return errors.New("rabbitmq: WithNackDeadLetter and WithDeadLetter both given")
	case len(c.delays) == 0:
		return errors.New("rabbitmq: no retry delays")
	case c.waits.Error <= 0 || c.waits.Busy <= 0:
		return fmt.Errorf("rabbitmq: error delay %v and busy delay %v, want both more than 0", c.waits.Error, c.waits.Busy)
	}
	for _, d := range c.delays {
		if d < time.Millisecond {
			return fmt.Errorf("rabbitmq: retry delay %v, want at least 1ms", d)
		}
	}
	return nil
}

// receiver settles deliveries.
type receiver struct {
	cfg     config
	grid    *client.Client
	ns      string
	queue   string
	h       Handler
	pub     *amqp.Channel
	returns *returns
	m       *adapter.Metrics
	iso     *client.Isolation // keeps a crash loop's culprit apart
}

// handle processes d and settles it.
func (r *receiver) handle(ctx context.Context, d amqp.Delivery) {
	if ctx.Err() != nil {
		r.settle(ctx, d, adapter.Verdict{Outcome: adapter.NotStarted, Action: adapter.Requeue})
		return
	}
	key, err := r.cfg.key(d)
	if err != nil {
		r.settle(ctx, d, adapter.Verdict{Outcome: adapter.NoKey, Action: adapter.DeadLetter, Cause: err})
		return
	}
	popts := adapter.ProcessOptions(r.cfg.process, r.iso, d.Redelivered, d, r.cfg.fingerprint, r.cfg.entity)
	dctx, dcancel := adapter.Draining(ctx, r.cfg.waits.StopGrace)
	defer dcancel()
	hctx := client.ContextWithCorrelationID(dctx, d.CorrelationId)
	out, err := r.grid.Process(hctx, r.ns, key, func(ctx context.Context, l client.Lease) ([]byte, error) {
		return r.h(ctx, d, l)
	}, popts...)
	r.settle(ctx, d, adapter.Judge(ctx, out, err, r.cfg.waits))
}

// settle does v's action to d. A retry or a dead letter publishes a copy
// first and acks d once the broker confirmed it and no queue returned it;
// if that fails, d is handed back to its queue after the error delay.
func (r *receiver) settle(ctx context.Context, d amqp.Delivery, v adapter.Verdict) {
	var err error
	switch {
	case v.Action == adapter.Ack:
		err = d.Ack(false)
	case v.Action == adapter.Requeue:
		err = d.Nack(false, true)
	case v.Action == adapter.DeadLetter && r.cfg.nackDead:
		err = d.Nack(false, false)
	case v.Action == adapter.DeadLetter:
		reason := string(v.Outcome)
		if v.Cause != nil {
			reason += ": " + v.Cause.Error()
		}
		err = r.republish(ctx, d, r.cfg.deadLetter.exchange, r.cfg.deadLetter.key, amqp.Table{"x-grid-reason": reason})
	case v.Action == adapter.Retry:
		err = r.republish(ctx, d, "", r.retryQueue(v.Delay), nil)
	}
	action := v.Action
	if err != nil && action != adapter.Ack && action != adapter.Requeue {
		// The copy did not make it: hand the message back instead, after a
		// pause, so that a queue missing for good does not spin.
		if ctx.Err() == nil {
			t := time.NewTimer(r.cfg.waits.Error)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if nerr := d.Nack(false, true); nerr != nil {
			err = errors.Join(err, nerr)
		}
		action = adapter.Requeue
	}
	r.m.Count(v.Outcome, action)
	attrs := []any{"queue", r.queue, "message_id", d.MessageId, "correlation_id", d.CorrelationId,
		"outcome", v.Outcome, "action", action, "delay", v.Delay, "cause", v.Cause, "error", err}
	switch {
	case err != nil:
		r.warn("rabbitmq: message not settled as decided; handed back to its queue", attrs...)
	case v.Action == adapter.DeadLetter && r.cfg.nackDead:
		r.warn("rabbitmq: message dead-lettered by Nack(requeue=false): RabbitMQ drops it unless the queue has a dead-letter exchange", attrs...)
	case r.cfg.logger != nil && (action != adapter.Ack || v.Cause != nil):
		r.cfg.logger.Info("rabbitmq: message settled", attrs...)
	}
}

// warn logs a warning to WithLogger's logger, or slog.Default().
func (r *receiver) warn(msg string, attrs ...any) {
	l := r.cfg.logger
	if l == nil {
		l = slog.Default()
	}
	l.Warn(msg, attrs...)
}

// retryQueue is the retry queue of the shortest delay at least d.
func (r *receiver) retryQueue(d time.Duration) string {
	i, _ := slices.BinarySearch(r.cfg.delays, d)
	i = min(i, len(r.cfg.delays)-1)
	return RetryQueue(r.queue, r.cfg.delays[i])
}

// republish publishes a copy of d (body, properties and headers, plus
// extra) to exchange with key, waits for the broker's confirm and acks d,
// unless the broker refused the copy or returned it.
func (r *receiver) republish(ctx context.Context, d amqp.Delivery, exchange, key string, extra amqp.Table) error {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	for k, v := range extra {
		headers[k] = v
	}
	headers["x-grid-redeliveries"] = redeliveries(d) + 1
	id := r.returns.next()
	headers[publishIDHeader] = id
	msg := amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type,
		UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}
	// The copy must reach the broker even while Consume stops.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// Mandatory: a copy that no queue takes comes back (returns).
	conf, err := r.pub.PublishWithDeferredConfirmWithContext(pctx, exchange, key, true, false, msg)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish to %q/%q: %w", exchange, key, err)
	}
	ok, err := conf.WaitContext(pctx)
	// Asked even when the wait failed, so that a return that came is not
	// kept for ever.
	ret := r.returns.returned(id)
	switch {
	case err != nil:
		return fmt.Errorf("rabbitmq: confirm of %q/%q: %w", exchange, key, err)
	case !ok:
		return fmt.Errorf("rabbitmq: the broker refused the copy to %q/%q", exchange, key)
	case ret != nil:
		return fmt.Errorf("rabbitmq: no queue took the copy to %q/%q: %d %s", exchange, key, ret.ReplyCode, ret.ReplyText)
	}
	return d.Ack(false)
}

// redeliveries is how many times the adapter has sent d back through a
// retry queue before.
func redeliveries(d amqp.Delivery) int64 {
	switch v := d.Headers["x-grid-redeliveries"].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}
