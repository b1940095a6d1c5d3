// Package jetstream runs the grid's idempotent receiver on a NATS
// JetStream consumer, over the broker's own Go client
// (github.com/nats-io/nats.go/jetstream): every message goes through
// client.Process, and its outcome becomes what JetStream understands.
//
//	err := jetstream.Consume(ctx, cons, grid, "payments", handle)
//
// # Outcomes
//
//	the handler succeeded (COMPLETED)        Ack
//	DUPLICATE, STALE                         Ack: the message was handled before
//	the handler failed, retryably (FAILED)   NakWithDelay(the grid's retry-after)
//	BUSY (another consumer holds the key)    kept, InProgress, asked again every WithBusyDelay
//	                                         (1s) for up to WithBusyHold (30s); then
//	                                         NakWithDelay(the holder's whole retry-after)
//	POISONED, MISMATCH, no key               published to WithDeadLetter's subject with the
//	                                         reason (when set), then Term
//	shutdown (ctx ended)                     running handlers finish within WithStopGrace and
//	                                         settle as above; one cancelled past it: the key
//	                                         is failed (attempt counted), Nak
//	the grid unreachable, a lease lost       NakWithDelay(WithErrorDelay)
//
// While the handler runs, the message's ack deadline (the consumer's
// AckWait) is pushed back with InProgress every third of it, so JetStream
// does not redeliver a message whose lease the grid still extends. A dead
// letter is published, and acknowledged by the stream that captures the
// subject, before the message is terminated: a crash between the two
// leaves a copy in both places rather than none.
//
// # BUSY: waiting for the holder without spending deliveries
//
// A message the grid answers BUSY is usually a redelivery whose holder
// died mid-handler: the grid keeps the key PROCESSING until the holder's
// lease ends, and only then lets another consumer take it over. Every Nak
// spends one of the message's deliveries, and a consumer with MaxDeliver
// stops delivering a message that has spent them: Nak'ing each BUSY after
// a second would use the message up while the dead holder's lease runs
// out, and leave the key PROCESSING with no message left to finish it.
// So Consume keeps a BUSY message instead: it tells JetStream it is still
// working on it (InProgress, which pushes the ack deadline back without
// spending a delivery, now and every third of the ack wait, so a
// retry-after longer than AckWait is no different), and asks the grid
// again after the holder's retry-after, at most WithBusyDelay later (a live
// holder usually settles long before its lease ends, and the message is
// then acked as a DUPLICATE at once). A dead holder's lease ends within
// the wait, and the message is taken over on the delivery that found it
// BUSY.
//
// A kept message occupies one of the WithConcurrency slots, and a live
// holder that keeps extending its lease (a long handler working on the
// same key from another copy of the message) would hold it there for as
// long as it works. So a message is kept for at most WithBusyHold (30s,
// the client's default lease: a dead holder of the default lease has
// ended by then) from the first BUSY; still BUSY then, it is handed back
// with NakWithDelay of the whole retry-after the grid gave: one delivery
// per lease of the holder, not one per second, and the slot goes to other
// messages meanwhile. Set WithBusyHold to your longest lease to take over
// every dead holder without a redelivery, or to 0 to hand every BUSY
// message back at once (one delivery per holder's lease). When ctx ends, a
// kept message is handed back with Nak.
//
// # Keys
//
// The key is the "Idempotency-Key" header when the message has one, else
// its "Nats-Msg-Id" (JetStream's own deduplication id, which the producer
// sets), else "<stream>/<stream sequence>". The last catches JetStream's
// redeliveries of a stored message only, not a producer that published the
// same event twice; WithKey replaces the rule.
//
// # Concurrency and shutdown
//
// Consume pulls up to WithConcurrency (32) messages at once and runs them
// at once; the grid client batches their Reserves. When ctx ends it drains
// the consumer: the messages already pulled are handed back with Nak, the
// handlers in flight see their context end (Process releases their keys),
// and Consume returns nil once every message is settled. A pull request of
// the stopped consumer can outlive it on the server (until its expiry) and
// take a handed-back message; JetStream then delivers that message again
// after the ack wait.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// The headers a message's key is read from, in order.
const (
	KeyHeader   = "Idempotency-Key"
	MsgIDHeader = jetstream.MsgIDHeader // Nats-Msg-Id
	// ReasonHeader carries why a dead letter was set aside.
	ReasonHeader = "Grid-Reason"
)

// handBackDelay is when a message a stopping consumer hands back may be
// delivered again. Not at once: while the consumer drains, its pull request
// is still open on the server, which would deliver the message straight
// back to it, to be handed back again, each round spending one of the
// stream's MaxDeliver deliveries.
const handBackDelay = time.Second

// Handler processes one message under the grid's lease. ctx carries the
// message's correlation id (the "Correlation-Id" header, client.CorrelationID)
// and ends when the lease is lost, or when Consume stops and its stop grace
// (WithStopGrace) has run out.
type Handler func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error)

// Option configures Consume.
type Option func(*config)

type config struct {
	concurrency int
	key         func(jetstream.Msg) (string, error)
	process     []client.ProcessOption
	fingerprint func(jetstream.Msg) uint64
	entity      func(jetstream.Msg) (entity string, version uint64, ok bool)
	delays      adapter.Delays
	busyHold    time.Duration
	deadLetter  *deadLetter
	registerer  prometheus.Registerer
	logger      *slog.Logger
}

type deadLetter struct {
	js      jetstream.JetStream
	subject string
}

// WithConcurrency sets how many messages are pulled and run at once.
// Default 32.
func WithConcurrency(n int) Option { return func(c *config) { c.concurrency = n } }

// WithKey sets how a message's idempotency key is found. An error
// dead-letters the message.
func WithKey(f func(jetstream.Msg) (string, error)) Option { return func(c *config) { c.key = f } }

// WithFingerprint sets a fingerprint of the payload: the same key with
// another fingerprint answers MISMATCH, and the message is dead-lettered.
func WithFingerprint(f func(jetstream.Msg) uint64) Option {
	return func(c *config) { c.fingerprint = f }
}

// WithEntity names the entity a message changes and its version, when it
// has them (ok): a version not newer than the entity's last completed one
// answers STALE, and the message is acked without running the handler.
func WithEntity(f func(jetstream.Msg) (entity string, version uint64, ok bool)) Option {
	return func(c *config) { c.entity = f }
}

// WithProcessOptions passes options to every client.Process call.
func WithProcessOptions(opts ...client.ProcessOption) Option {
	return func(c *config) { c.process = append(c.process, opts...) }
}

// WithErrorDelay sets how long a message waits before it is delivered
// again when the grid could not be asked or the lease was lost. Default 1s.
func WithErrorDelay(d time.Duration) Option { return func(c *config) { c.delays.Error = d } }

// WithStopGrace sets how long a stopping Consume (its ctx ended) lets the
// handlers it started finish and settle before it cancels them (default
// 10 s). A handler cancelled mid-way may have applied its effect, so its
// key is failed, the attempt counted, not released: give handlers the
// time their effect takes. 0 cancels them at once.
func WithStopGrace(d time.Duration) Option { return func(c *config) { c.delays.StopGrace = d } }

// WithBusyDelay caps how long a message kept after BUSY (another consumer
// holds the key) waits before the grid is asked again. The grid answers
// with the rest of the holder's lease; a holder usually settles long
// before. Default 1s.
func WithBusyDelay(d time.Duration) Option { return func(c *config) { c.delays.Busy = d } }

// WithBusyHold sets how long, from the first BUSY, Consume keeps a message
// the grid answers BUSY (see the package documentation) before it hands it
// back with NakWithDelay of the holder's whole retry-after. 0 hands it back
// at once. Default 30s (client.DefaultLease).
func WithBusyHold(d time.Duration) Option { return func(c *config) { c.busyHold = d } }

// WithDeadLetter publishes dead letters to subject through js (a stream
// must capture it: the publish waits for its acknowledgement), with the
// reason in the "Grid-Reason" header, before terminating them.
func WithDeadLetter(js jetstream.JetStream, subject string) Option {
	return func(c *config) { c.deadLetter = &deadLetter{js, subject} }
}

// WithRegisterer registers the adapter's metrics:
// l4xg_grid_adapter_messages_total{adapter="jetstream",outcome,action}.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }

// WithLogger logs what the adapter does to a message besides acking it.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// DefaultKey is the default key rule: the "Idempotency-Key" header, else
// "Nats-Msg-Id", else "<stream>/<stream sequence>".
func DefaultKey(msg jetstream.Msg) (string, error) {
	h := msg.Headers()
	for _, name := range []string{KeyHeader, MsgIDHeader} {
		if v := h.Get(name); v != "" {
			return v, nil
		}
	}
	md, err := msg.Metadata()
	if err != nil {
		return "", fmt.Errorf("jetstream: no %s or %s header, and no metadata: %w", KeyHeader, MsgIDHeader, err)
	}
	return fmt.Sprintf("%s/%d", md.Stream, md.Sequence.Stream), nil
}

// Consume pulls messages from cons, runs h for each through grid.Process
// in namespace ns, and settles each by the outcome (see the package
// documentation). It returns nil once ctx has ended and every message it
// pulled is settled, or an error when the consumer fails.
func Consume(ctx context.Context, cons jetstream.Consumer, grid *client.Client, ns string, h Handler, opts ...Option) error {
	cfg := config{concurrency: 32, key: DefaultKey, delays: adapter.DefaultDelays(), busyHold: client.DefaultLease}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cons == nil || grid == nil || h == nil:
		return errors.New("jetstream: Consume needs a consumer, a grid client and a handler")
	case cfg.concurrency < 1:
		return fmt.Errorf("jetstream: concurrency %d, want at least 1", cfg.concurrency)
	case cfg.key == nil:
		return errors.New("jetstream: nil key rule")
	case cfg.delays.Error <= 0 || cfg.delays.Busy <= 0:
		return fmt.Errorf("jetstream: error delay %v and busy delay %v, want both more than 0", cfg.delays.Error, cfg.delays.Busy)
	case cfg.busyHold < 0:
		return fmt.Errorf("jetstream: busy hold %v, want at least 0", cfg.busyHold)
	}
	m, err := adapter.NewMetrics("jetstream", cfg.registerer)
	if err != nil {
		return err
	}
	ackWait := 30 * time.Second // JetStream's default
	if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		ackWait = info.Config.AckWait
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(cfg.concurrency))
	if err != nil {
		return fmt.Errorf("jetstream: pull: %w", err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Drain)()
	r := &receiver{cfg: cfg, grid: grid, ns: ns, h: h, m: m, ackWait: ackWait, iso: client.NewIsolation()}
	msgs := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range cfg.concurrency {
		wg.Go(func() {
			for msg := range msgs {
				r.handle(ctx, msg)
			}
		})
	}
	var pullErr error
	for {
		msg, err := it.Next()
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			continue // missed heartbeats: the iterator pulls again by itself
		}
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() == nil {
				pullErr = fmt.Errorf("jetstream: next message: %w", err)
			}
			break
		}
		msgs <- msg
	}
	close(msgs)
	wg.Wait()
	return pullErr
}

type receiver struct {
	cfg     config
	grid    *client.Client
	ns      string
	h       Handler
	m       *adapter.Metrics
	ackWait time.Duration
	iso     *client.Isolation // keeps a crash loop's culprit apart
}

// handle processes msg and settles it.
func (r *receiver) handle(ctx context.Context, msg jetstream.Msg) {
	if ctx.Err() != nil {
		r.settle(ctx, msg, adapter.Verdict{Outcome: adapter.NotStarted, Action: adapter.Requeue})
		return
	}
	key, err := r.cfg.key(msg)
	if err != nil {
		r.settle(ctx, msg, adapter.Verdict{Outcome: adapter.NoKey, Action: adapter.DeadLetter, Cause: err})
		return
	}
	popts := adapter.ProcessOptions(r.cfg.process, r.iso, redelivered(msg), msg, r.cfg.fingerprint, r.cfg.entity)
	dctx, dcancel := adapter.Draining(ctx, r.cfg.delays.StopGrace)
	defer dcancel()
	// Keep JetStream from redelivering msg, which would spend one of its
	// deliveries, while it is here: waiting for its turn (a message taken
	// over from a crashed holder runs alone, client.Isolation), its
	// Reserve, its handler, a BUSY hold.
	stop := r.inProgress(dctx, msg)
	defer stop()
	hctx := client.ContextWithCorrelationID(dctx, msg.Headers().Get("Correlation-Id"))
	h := func(ctx context.Context, l client.Lease) ([]byte, error) { return r.h(ctx, msg, l) }
	var holdEnd time.Time // when a BUSY message is handed back; zero before the first BUSY
	for {
		out, err := r.grid.Process(hctx, r.ns, key, h, popts...)
		v := adapter.Judge(ctx, out, err, r.cfg.delays)
		var busy *client.BusyError
		if v.Outcome != adapter.Busy || !errors.As(err, &busy) {
			r.settle(ctx, msg, v)
			return
		}
		now := time.Now()
		if holdEnd.IsZero() {
			holdEnd = now.Add(r.cfg.busyHold)
		}
		wait := min(busy.RetryAfter, r.cfg.delays.Busy, holdEnd.Sub(now))
		if wait <= 0 {
			// Held long enough: hand it back until the holder's lease
			// ends, one delivery per lease.
			v.Delay = max(busy.RetryAfter, time.Millisecond)
			r.settle(ctx, msg, v)
			return
		}
		if !r.keepBusy(ctx, msg, v, wait) {
			r.settle(ctx, msg, adapter.Verdict{Outcome: adapter.NotStarted, Action: adapter.Requeue, Cause: ctx.Err()})
			return
		}
	}
}

// keepBusy keeps msg, which the grid answered BUSY (v), for wait: it tells
// JetStream it is still being worked on, at once (handle keeps telling it
// every third of the ack wait), so that waiting spends none of its
// deliveries. It counts the wait as a retry and reports false when ctx
// ends first.
func (r *receiver) keepBusy(ctx context.Context, msg jetstream.Msg, v adapter.Verdict, wait time.Duration) bool {
	_ = msg.InProgress() // a failure is a redelivery, which the grid answers
	r.m.Count(v.Outcome, v.Action)
	if r.cfg.logger != nil {
		r.cfg.logger.Info("jetstream: key busy, message kept", "subject", msg.Subject(), "wait", wait, "cause", v.Cause)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		_ = msg.InProgress() // a fresh ack wait for the Reserve and the handler
		return true
	case <-ctx.Done():
		return false
	}
}

// inProgress tells JetStream, every third of the ack wait until stop is
// called, that msg is still being worked on.
func (r *receiver) inProgress(ctx context.Context, msg jetstream.Msg) (stop func()) {
	every := max(r.ackWait/3, 10*time.Millisecond)
	return adapter.KeepAlive(ctx, func() time.Duration { return every }, func(context.Context) { _ = msg.InProgress() })
}

// settle does v's action to msg.
func (r *receiver) settle(ctx context.Context, msg jetstream.Msg, v adapter.Verdict) {
	var err error
	switch v.Action {
	case adapter.Ack:
		err = msg.Ack()
	case adapter.Requeue: // only by a stopping consumer
		err = msg.NakWithDelay(handBackDelay)
	case adapter.Retry:
		err = msg.NakWithDelay(v.Delay)
	case adapter.DeadLetter:
		reason := string(v.Outcome)
		if v.Cause != nil {
			reason += ": " + v.Cause.Error()
		}
		if dl := r.cfg.deadLetter; dl != nil {
			if err = r.publishDeadLetter(ctx, msg, dl, reason); err != nil {
				// Not set aside: let JetStream deliver it again later.
				err = errors.Join(err, msg.NakWithDelay(r.cfg.delays.Error))
				r.m.Count(v.Outcome, adapter.Retry)
				r.log(msg, v, adapter.Retry, err)
				return
			}
		}
		// Term, not TermWithReason: servers before 2.10.4 take a reason
		// for an ack they do not know, and redeliver.
		err = msg.Term()
	}
	r.m.Count(v.Outcome, v.Action)
	r.log(msg, v, v.Action, err)
}

func (r *receiver) log(msg jetstream.Msg, v adapter.Verdict, action adapter.Action, err error) {
	if r.cfg.logger != nil && (action != adapter.Ack || v.Cause != nil || err != nil) {
		r.cfg.logger.Info("jetstream: message settled", "subject", msg.Subject(), "outcome", v.Outcome,
			"action", action, "delay", v.Delay, "cause", v.Cause, "error", err)
	}
}

// publishDeadLetter publishes a copy of msg, with the reason, to the dead
// letter subject and waits for the stream's acknowledgement.
func (r *receiver) publishDeadLetter(ctx context.Context, msg jetstream.Msg, dl *deadLetter, reason string) error {
	out := nats.NewMsg(dl.subject)
	for k, vs := range msg.Headers() {
		if k == MsgIDHeader {
			continue // the stream would drop the copy as a duplicate of the original
		}
		out.Header[k] = slices.Clone(vs)
	}
	out.Header.Set(ReasonHeader, reason)
	out.Header.Set("Grid-Subject", msg.Subject())
	out.Data = msg.Data()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := dl.js.PublishMsg(pctx, out); err != nil {
		return fmt.Errorf("jetstream: dead letter to %s: %w", dl.subject, err)
	}
	return nil
}

// redelivered reports whether the server delivers msg again.
func redelivered(msg jetstream.Msg) bool {
	md, err := msg.Metadata()
	return err == nil && md.NumDelivered > 1
}
