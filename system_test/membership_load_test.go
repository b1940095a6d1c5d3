package system_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/client"
)

// ackLoad is the load of TestMembershipRandomized: workers reserve and
// complete fresh keys through one routing client dialled with every node's
// address and default options, as an application would. It records every
// acknowledged Complete and every error a caller saw.
type ackLoad struct {
	cl *client.Client
	// checker asks the acknowledged keys again (checkDuplicates).
	checker *client.Client
	ctx     context.Context // ends at stop: calls cut by it are not errors
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu        sync.Mutex
	acked     []string // keys whose Complete was acknowledged
	errs      []error
	retryBusy int // Reserves answered BUSY: a resend after a send that was applied
}

const ackNS = "acked"

func startAckLoad(cl, checker *client.Client, workers int) *ackLoad {
	l := &ackLoad{cl: cl, checker: checker}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; l.ctx.Err() == nil; i++ {
				l.one(fmt.Sprintf("w%d-%d", w, i))
			}
		}()
	}
	return l
}

// one reserves and completes key.
func (l *ackLoad) one(key string) {
	ctx, cancel := context.WithTimeout(l.ctx, 20*time.Second)
	defer cancel()
	r, err := l.cl.Reserve(ctx, ackNS, key)
	if err == nil && r.Outcome == client.OutcomeBusy {
		l.mu.Lock()
		l.retryBusy++
		l.mu.Unlock()
		return
	}
	if err == nil && r.Outcome != client.OutcomeAcquired {
		err = fmt.Errorf("reserve of a fresh key answered %v", r.Outcome)
	}
	if err == nil {
		_, err = l.cl.Complete(ctx, ackNS, key, r.Token)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.acked = append(l.acked, key)
	case l.ctx.Err() == nil:
		l.errs = append(l.errs, fmt.Errorf("%s: %w", key, err))
	}
}

func (l *ackLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// snapshot returns the acknowledged keys and the callers' errors so far.
func (l *ackLoad) snapshot() (acked []string, errs []error, retryBusy int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.acked...), append([]error(nil), l.errs...), l.retryBusy
}

// duplicatesCheckTimeout bounds checkDuplicates, and is the retry budget
// of its client (checkerRetry): the check asks each key until it has an
// answer or its time is up.
const duplicatesCheckTimeout = 60 * time.Second

// checkerRetry is the retry policy of the client that checks
// acknowledged keys. The check is about durability: every acknowledged
// Complete must answer DUPLICATE. An answer that the grid is unavailable
// says nothing either way, so the checker asks again for as long as the
// check lasts, where an application's client (the load's, with the
// default policy) gives up after DefaultRetryBudget. The check still
// fails on a key that gets no answer within duplicatesCheckTimeout.
var checkerRetry = client.WithRetryPolicy(budgetOf(duplicatesCheckTimeout))

// budgetOf is the default retry policy with budget d.
func budgetOf(d time.Duration) client.RetryPolicy {
	p := client.DefaultRetryPolicy()
	p.Budget = d
	return p
}

// checkDuplicates reserves every key in keys again through the checker:
// each must answer DUPLICATE. It returns the first few that do not.
func (l *ackLoad) checkDuplicates(keys []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), duplicatesCheckTimeout)
	defer cancel()
	var (
		mu   sync.Mutex
		bad  []string
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 32 { // concurrent calls share batches
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= len(keys) {
					return
				}
				r, err := l.checker.Reserve(ctx, ackNS, keys[k])
				if err != nil || r.Outcome != client.OutcomeDuplicate {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s: %v (state %v, token %d) %v", keys[k], r.Outcome, r.State, r.Token, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d acknowledged Completes do not answer DUPLICATE: %s", len(bad), len(keys), strings.Join(bad[:min(5, len(bad))], "; "))
	}
	return nil
}

// histLoad runs the linearizability workload (the worker of lin_test.go)
// on a few keys through routing clients that send each operation once, and
// records it. Its operations come in budgets, one per membership step, so
// that the history stays small enough to check after every step; quiesce
// holds the workers between operations so that a check sees every
// operation that started.
type histLoad struct {
	rec    *check.Recorder
	g      *check.Gate
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	budget chan struct{} // one token per operation
	done   atomic.Int64  // operations ended
	hold   sync.RWMutex  // read-held by each operation in flight
}

func startHistLoad(t *testing.T, clients []*client.Client, seed uint64, workers, keys int) *histLoad {
	h := &histLoad{rec: check.NewRecorder(), g: check.NewGate(), budget: make(chan struct{}, 1<<16)}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	w := workload{seed: seed, keys: keys}
	for i := range workers {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			exec := check.ClientExecutor{C: clients[i%len(clients)], NS: "chaos"}
			wk := newWorker(i, w)
			for {
				select {
				case <-h.budget:
				case <-h.ctx.Done():
					return
				}
				h.hold.RLock()
				ok := wk.step(h.ctx, t, exec, h.rec, h.g)
				h.hold.RUnlock()
				h.done.Add(1)
				if !ok {
					return
				}
			}
		}()
	}
	return h
}

// allow lets the workers make n more operations.
func (h *histLoad) allow(n int) {
	for range n {
		select {
		case h.budget <- struct{}{}:
		default:
			return
		}
	}
}

func (h *histLoad) stop() {
	h.cancel()
	h.g.Raise()
	h.wg.Wait()
}

// check holds the workers, checks the history so far with porcupine and
// CheckTokens, and lets them go on. Every operation that started has ended
// (answered, or recorded with an open end), so the history is complete up
// to now.
func (h *histLoad) check(dir, name string) (check.Stats, error) {
	h.hold.Lock()
	ops := h.rec.Operations()
	h.hold.Unlock()
	st := check.Count(ops)
	if err := check.FencingTokens(ops); err != nil {
		return st, err
	}
	v, err := check.Linearizable(ops, 60*time.Second, dir, name)
	if err != nil {
		return st, err
	}
	switch v.Result {
	case porcupine.Ok:
		return st, nil
	case porcupine.Unknown:
		return st, errors.New("porcupine timed out: neither a pass nor a failure")
	default:
		return st, fmt.Errorf("history not linearizable (visualization %s)", v.Visualization)
	}
}
