package servicebus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/adaptertest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
)

// These tests run on fakeQueue (no Service Bus emulator runs here) and a
// real grid node.

func consume(t *testing.T, q Receiver, c *client.Client, h Handler, opts ...Option) (stop func() error) {
	t.Helper()
	return adaptertest.Run(t, func(ctx context.Context) error { return Consume(ctx, q, c, "test", h, opts...) })
}

// Every outcome row in one receive: completed, a duplicate, a retryable
// failure scheduled for later and then completed, a poisoned message and
// one without a key dead-lettered with their reasons, a reused key
// (MISMATCH) and an older entity version (STALE).
func TestOutcomes(t *testing.T) {
	c, _ := adaptertest.Grid(t)
	q := newFakeQueue(5*time.Second, 10)
	eff := adaptertest.NewEffects()
	var flaky sync.Once
	h := func(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error) {
		switch string(msg.Body) {
		case "poison":
			return nil, client.Poison(errors.New("unparseable payment"))
		case "flaky":
			failed := false
			flaky.Do(func() { failed = true })
			if failed {
				return nil, client.RetryAfter(errors.New("ledger busy"), 50*time.Millisecond)
			}
		}
		eff.Add(ctx, l)
		return nil, nil
	}
	version := func(msg *azservicebus.ReceivedMessage) (string, uint64, bool) {
		v, ok := msg.ApplicationProperties["version"].(int)
		return "account-7", uint64(v), ok
	}
	fingerprint := func(msg *azservicebus.ReceivedMessage) uint64 { return uint64(len(msg.Body)) + 1 }
	for i := range 20 {
		q.send(fmt.Sprintf("ok-%d", i), "ok", nil)
	}
	q.send("m-dup", "ok", map[string]any{KeyProperty: "dup"})
	q.send("m-dup-2", "ok", map[string]any{KeyProperty: "dup"})
	q.send("flaky", "flaky", nil)
	q.send("poison", "poison", nil)
	q.send("", "no key", nil)
	q.send("balance-v2", "set", map[string]any{"version": 2})
	reg := prometheus.NewRegistry()
	consume(t, q, c, h, WithBatch(64), WithRetryScheduler(q), WithEntity(version), WithFingerprint(fingerprint), WithRegisterer(reg))
	testwait.For(t, 20*time.Second, "every message settled", func() bool {
		waiting, _, dead := q.state()
		return waiting == 0 && dead == 2 && eff.Get("flaky") == 1
	}, func() string {
		w, d, dl := q.state()
		return fmt.Sprintf("waiting %d, completed %d, dead %d, effects %v", w, d, dl, eff)
	})
	q.send("ok-3", "ok but longer", nil)
	q.send("balance-v1", "set", map[string]any{"version": 1})
	testwait.For(t, 20*time.Second, "the mismatch and the stale version settled", func() bool {
		waiting, _, dead := q.state()
		return waiting == 0 && dead == 3
	})
	for i := range 20 {
		if n := eff.Get(fmt.Sprintf("ok-%d", i)); n != 1 {
			t.Errorf("ok-%d applied %d times", i, n)
		}
	}
	for key, want := range map[string]int{"dup": 1, "flaky": 1, "balance-v2": 1, "balance-v1": 0} {
		if n := eff.Get(key); n != want {
			t.Errorf("%s applied %d times, want %d", key, n, want)
		}
	}
	dead := q.deadLetters()
	for id, want := range map[string]string{"poison": "poisoned: ", "": "no_key: ", "ok-3": "mismatch: "} {
		if !strings.HasPrefix(dead[id], want) {
			t.Errorf("dead letter %q: %q, want reason %q and a description", id, dead[id], want)
		}
	}
	for _, want := range []struct {
		o adapter.Outcome
		a adapter.Action
		n float64
	}{{adapter.Failed, adapter.Retry, 1}, {adapter.Stale, adapter.Ack, 1}, {adapter.Duplicate, adapter.Ack, 1}} {
		if got := adaptertest.Counted(t, reg, "servicebus", want.o, want.a); got != want.n {
			t.Errorf("messages %s/%s = %v, want %v", want.o, want.a, got, want.n)
		}
	}
}

// A consumer that dies in the middle of a handler stops renewing the
// message's lock and the key's lease. Service Bus hands the message to the
// next receiver once the lock lapses; the grid answers BUSY until the lease
// does, and then the next consumer takes the key over with a larger token
// and applies it once.
func TestCrashMidHandlerIsTakenOver(t *testing.T) {
	c, n := adaptertest.Grid(t)
	q := newFakeQueue(500*time.Millisecond, 100)
	eff := adaptertest.NewEffects()
	cA := adaptertest.Dial(t, n)
	lease := client.WithLease(2 * time.Second)
	entered := make(chan client.Lease, 1)
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	rcvA := &dyingReceiver{Receiver: q}
	go func() {
		doneA <- Consume(ctxA, rcvA, cA, "test", func(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error) {
			entered <- l
			<-ctx.Done()
			return nil, ctx.Err()
		}, WithBatch(1), WithProcessOptions(lease))
	}()
	q.send("payment-1", "pay", nil)
	var first client.Lease
	select {
	case first = <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first consumer never ran the handler")
	}
	// "kill -9": the grid client stops extending the lease, and the
	// receiver neither renews nor settles anything again: the lock lapses.
	rcvA.die()
	cA.Close()
	cancelA()
	<-doneA

	reg := prometheus.NewRegistry()
	consume(t, q, c, func(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error) {
		eff.Add(ctx, l)
		return nil, nil
	}, WithProcessOptions(lease), WithRetryScheduler(q), WithRegisterer(reg))
	testwait.For(t, 30*time.Second, "the payment applied by the second consumer", func() bool { return eff.Get("payment-1") == 1 })
	second := eff.FirstToken("payment-1")
	if second <= first.Token {
		t.Fatalf("takeover token %d, want more than the crashed holder's %d", second, first.Token)
	}
	testwait.For(t, 20*time.Second, "the queue empty", func() bool { w, _, _ := q.state(); return w == 0 })
}

// A handler that runs longer than the lock keeps its message: the lock is
// renewed while it runs, so the message is delivered once.
func TestLongHandlerRenewsTheLock(t *testing.T) {
	c, _ := adaptertest.Grid(t)
	q := newFakeQueue(300*time.Millisecond, 100)
	deliveries := make(chan uint32, 10)
	consume(t, q, c, func(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error) {
		deliveries <- msg.DeliveryCount
		select {
		case <-time.After(time.Second): // three locks' worth of work
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	}, WithProcessOptions(client.WithLease(5*time.Second)))
	q.send("slow-1", "slow", nil)
	if d := <-deliveries; d != 1 {
		t.Fatalf("first run on delivery %d", d)
	}
	testwait.For(t, 20*time.Second, "the message completed", func() bool { _, done, _ := q.state(); return done == 1 })
	select {
	case d := <-deliveries:
		t.Fatalf("the message was delivered again (delivery %d) while its handler ran", d)
	default:
	}
}

// Stopping a consumer releases the keys its handlers hold and abandons
// their messages: the next consumer runs each as attempt 1.
func TestShutdownHandsMessagesBack(t *testing.T) {
	c, _ := adaptertest.Grid(t)
	q := newFakeQueue(30*time.Second, 100)
	const msgs = 5
	for i := range msgs {
		q.send(fmt.Sprintf("m-%d", i), "pay", nil)
	}
	var running sync.WaitGroup
	running.Add(msgs)
	stop := consume(t, q, c, func(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error) {
		running.Done()
		<-ctx.Done()
		return nil, ctx.Err()
	}, WithBatch(msgs))
	running.Wait()
	if err := stop(); err != nil {
		t.Fatalf("Consume after its context ended: %v, want nil", err)
	}
	attempts := make(chan int, msgs)
	consume(t, q, c, func(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error) {
		attempts <- l.Attempt
		return nil, nil
	})
	for range msgs {
		select {
		case a := <-attempts:
			if a != 1 {
				t.Fatalf("a handed-back message ran as attempt %d, want 1", a)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the handed-back messages did not come back")
		}
	}
}

// dyingReceiver is a receiver of a process that dies: after die, every
// call fails, as a dead process's would never reach the broker.
type dyingReceiver struct {
	Receiver
	mu   sync.Mutex
	dead bool
}

var errDead = errors.New("the process is gone")

func (d *dyingReceiver) die() { d.mu.Lock(); d.dead = true; d.mu.Unlock() }

func (d *dyingReceiver) gone() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.dead }

func (d *dyingReceiver) CompleteMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.CompleteMessageOptions) error {
	if d.gone() {
		return errDead
	}
	return d.Receiver.CompleteMessage(ctx, m, o)
}

func (d *dyingReceiver) AbandonMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.AbandonMessageOptions) error {
	if d.gone() {
		return errDead
	}
	return d.Receiver.AbandonMessage(ctx, m, o)
}

func (d *dyingReceiver) DeadLetterMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.DeadLetterOptions) error {
	if d.gone() {
		return errDead
	}
	return d.Receiver.DeadLetterMessage(ctx, m, o)
}

func (d *dyingReceiver) RenewMessageLock(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.RenewMessageLockOptions) error {
	if d.gone() {
		return errDead
	}
	return d.Receiver.RenewMessageLock(ctx, m, o)
}
