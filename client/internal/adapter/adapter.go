// Package adapter is what the broker adapters (client/rabbitmq,
// client/jetstream) share: how the outcome of client.Process is judged,
// and the metrics that count messages by outcome and broker action. Each
// adapter maps the four actions onto its broker.
package adapter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/prometheus/client_golang/prometheus"
)

// Outcome is what became of a message, as the metrics name it.
type Outcome string

// The outcomes.
const (
	Completed  Outcome = "completed"   // the handler ran and the key is COMPLETED
	Duplicate  Outcome = "duplicate"   // the key was completed before: the handler did not run
	Stale      Outcome = "stale"       // an older version of an entity than one applied
	Poisoned   Outcome = "poisoned"    // the key is POISONED
	Mismatch   Outcome = "mismatch"    // the key was reused for another payload
	NoKey      Outcome = "no_key"      // the message has no key
	Busy       Outcome = "busy"        // another consumer holds the key
	Failed     Outcome = "failed"      // the handler failed; the key is FAILED until its retry-after
	Released   Outcome = "released"    // the consumer stopped: the key was released
	NotStarted Outcome = "not_started" // the consumer stopped before the message began
	Error      Outcome = "error"       // the grid could not be asked, or the lease was lost
)

// Action is what the broker is told to do with a message.
type Action string

// The actions.
const (
	Ack        Action = "ack"         // done with: remove it
	Retry      Action = "retry"       // deliver it again after a delay
	DeadLetter Action = "dead_letter" // set it aside with the reason
	Requeue    Action = "requeue"     // hand it back at once, as if never delivered
)

// Verdict is what to do with a message.
type Verdict struct {
	Outcome Outcome
	Action  Action
	Delay   time.Duration // for Retry
	Cause   error         // why, when not a plain success
}

// Delays are the retry delays a verdict cannot take from the grid.
type Delays struct {
	// Error follows an error that says nothing of the key: the grid
	// unreachable, a lease lost or expired.
	Error time.Duration
	// Busy caps the wait after BUSY. The grid answers with the holder's
	// whole lease, but a holder usually settles long before it ends, and
	// asking again costs one Reserve.
	Busy time.Duration
	// StopGrace is how long a stopping consumer lets the handlers it
	// started go on before it cancels them (Draining).
	StopGrace time.Duration
}

// DefaultStopGrace is the adapters' default Delays.StopGrace: well within
// the 30 s a Kubernetes pod is given to stop.
const DefaultStopGrace = 10 * time.Second

// DefaultDelays are the adapters' defaults.
func DefaultDelays() Delays {
	return Delays{Error: time.Second, Busy: time.Second, StopGrace: DefaultStopGrace}
}

// Draining is the context to process one message under: it has ctx's
// values and ends grace after ctx (the consumer's) ends, or when cancel is
// called, so that a stopping consumer lets the handlers it started finish
// their effect and settle (a commit in flight, then Complete) instead of
// cancelling them mid-way, which leaves the effect's fate unknown (the
// grid then fails the key: client.Process). A grace of 0 or less cancels
// at once.
func Draining(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer
		done  bool
	)
	stopWatch := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		timer = time.AfterFunc(max(grace, 0), func() {
			cancel(fmt.Errorf("adapter: the consumer stopped and its stop grace (%v) ran out: %w", grace, context.Cause(ctx)))
		})
	})
	return dctx, func() {
		stopWatch()
		mu.Lock()
		done = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(context.Canceled)
	}
}

// Judge turns what client.Process returned for a message into a verdict.
// ctx is the consumer's: when it has ended, the message goes back to the
// broker at once.
func Judge(ctx context.Context, out client.Processed, err error, d Delays) Verdict {
	var busy *client.BusyError
	switch {
	case err == nil && out.Duplicate:
		return Verdict{Outcome: Duplicate, Action: Ack}
	case err == nil:
		return Verdict{Outcome: Completed, Action: Ack}
	case errors.Is(err, client.ErrStale):
		return Verdict{Outcome: Stale, Action: Ack, Cause: err}
	case errors.Is(err, client.ErrPoisoned):
		return Verdict{Outcome: Poisoned, Action: DeadLetter, Cause: err}
	case errors.Is(err, client.ErrMismatch):
		return Verdict{Outcome: Mismatch, Action: DeadLetter, Cause: err}
	case errors.As(err, &busy):
		return Verdict{Outcome: Busy, Action: Retry, Delay: min(busy.RetryAfter, d.Busy), Cause: err}
	case ctx.Err() != nil && out.RetryAfter > 0:
		// Stopped past its grace: the key was failed (it may have been
		// applied), and the message goes back at once.
		return Verdict{Outcome: Failed, Action: Requeue, Cause: err}
	case ctx.Err() != nil:
		return Verdict{Outcome: Released, Action: Requeue, Cause: err}
	case out.RetryAfter > 0:
		return Verdict{Outcome: Failed, Action: Retry, Delay: out.RetryAfter, Cause: err}
	default:
		return Verdict{Outcome: Error, Action: Retry, Delay: d.Error, Cause: err}
	}
}

// Metrics counts settled messages by outcome and action.
type Metrics struct{ settled *prometheus.CounterVec }

// NewMetrics returns the metrics of the named adapter, registered with reg
// unless it is nil:
// l4xg_grid_adapter_messages_total{adapter,outcome,action}.
func NewMetrics(adapter string, reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{settled: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "l4xg_grid_adapter_messages_total",
		Help:        "Messages a broker adapter settled, by the grid's outcome and the broker action taken.",
		ConstLabels: prometheus.Labels{"adapter": adapter},
	}, []string{"outcome", "action"})}
	if reg != nil {
		if err := reg.Register(m.settled); err != nil {
			return nil, fmt.Errorf("%s: register metrics: %w", adapter, err)
		}
	}
	return m, nil
}

// Count counts a message settled with outcome o by action a.
func (m *Metrics) Count(o Outcome, a Action) { m.settled.WithLabelValues(string(o), string(a)).Inc() }

// ProcessOptions are the options of the Process call for message m: base,
// the consumer's Isolation (every adapter keeps one, so that a crash loop
// poisons only its culprit), whether the broker delivers m again, and the
// fingerprint and the entity the adapter's options derive from m (either
// may be nil).
func ProcessOptions[M any](base []client.ProcessOption, iso *client.Isolation, redelivered bool, m M,
	fingerprint func(M) uint64, entity func(M) (string, uint64, bool)) []client.ProcessOption {
	opts := append(slices.Clone(base), client.WithIsolation(iso))
	if redelivered {
		opts = append(opts, client.Redelivered())
	}
	if fingerprint != nil {
		opts = append(opts, client.WithFingerprint(fingerprint(m)))
	}
	if entity != nil {
		if e, v, ok := entity(m); ok {
			opts = append(opts, client.WithEntity(e, v))
		}
	}
	return opts
}

// KeepAlive calls touch (a broker's "still working on it": extend a lock,
// a visibility timeout, an ack deadline) after each wait that next gives,
// until stop is called, and returns once touch has stopped. A failed touch
// is the broker delivering the message again, which the grid answers, so
// touch reports nothing.
func KeepAlive(ctx context.Context, next func() time.Duration, touch func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			t := time.NewTimer(next())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
				touch(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}
