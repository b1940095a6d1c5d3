package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/adaptertest"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// These tests run against the NATS server with JetStream on 127.0.0.1:4222
// (or GRID_TEST_NATS_URL). Without one they are skipped, unless
// GRID_TEST_BROKERS=required (as .ci/run sets it): then they fail.

func natsURL() string {
	if u := os.Getenv("GRID_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// env is a stream of the test's own ("<name>.in" and "<name>.dlq"), a
// durable consumer of its input and a grid.
type env struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	name   string
	grid   *client.Client
	node   *gridtest.Node
}

func setup(t *testing.T, ackWait time.Duration) *env {
	t.Helper()
	nc, err := nats.Connect(natsURL())
	if err != nil {
		if os.Getenv("GRID_TEST_BROKERS") == "required" {
			t.Fatalf("NATS at %s: %v", natsURL(), err)
		}
		t.Skipf("no NATS at %s (%v); GRID_TEST_BROKERS=required makes this a failure", natsURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := fmt.Sprintf("gridtest%x", rand.Uint32())
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatalf("create stream (is JetStream on?): %v", err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	if _, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "in", FilterSubject: name + ".in", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	}); err != nil {
		t.Fatal(err)
	}
	n := gridtest.Start(t)
	return &env{nc: nc, js: js, stream: st, name: name, grid: adaptertest.Dial(t, n), node: n}
}

func (e *env) consumer(t *testing.T, js jetstream.JetStream) jetstream.Consumer {
	t.Helper()
	c, err := js.Consumer(context.Background(), e.name, "in")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// publish sends a message to the input subject with headers (name, value
// pairs) and waits for the stream to store it.
func (e *env) publish(t *testing.T, body string, headers ...string) {
	t.Helper()
	m := nats.NewMsg(e.name + ".in")
	m.Data = []byte(body)
	for i := 0; i+1 < len(headers); i += 2 {
		m.Header.Set(headers[i], headers[i+1])
	}
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// deadLetters is how many messages the dead-letter subject holds.
func (e *env) deadLetters(t *testing.T) int {
	t.Helper()
	info, err := e.stream.Info(context.Background(), jetstream.WithSubjectFilter(e.name+".dlq"))
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Subjects[e.name+".dlq"])
}

// consume runs Consume until the test ends (or stop is called); stop
// waits for it and returns its error.
func consume(t *testing.T, cons jetstream.Consumer, c *client.Client, h Handler, opts ...Option) (stop func() error) {
	t.Helper()
	return adaptertest.Run(t, func(ctx context.Context) error { return Consume(ctx, cons, c, "test", h, opts...) })
}

// Every outcome row in one pull: completed, a duplicate (the same
// Idempotency-Key on two messages), a retryable failure that comes back
// after NakWithDelay and succeeds, a poisoned message and one without a
// key, both published to the dead-letter subject and terminated; a reused
// key (MISMATCH) and an older entity version (STALE).
func TestOutcomes(t *testing.T) {
	e := setup(t, 5*time.Second)
	eff := adaptertest.NewEffects()
	var flaky sync.Once
	h := func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
		switch string(msg.Data()) {
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
	requireHeader := func(msg jetstream.Msg) (string, error) {
		if k := msg.Headers().Get(KeyHeader); k != "" {
			return k, nil
		}
		return "", errors.New("no Idempotency-Key")
	}
	version := func(msg jetstream.Msg) (string, uint64, bool) {
		var v uint64
		_, err := fmt.Sscan(msg.Headers().Get("Version"), &v)
		return "account-7", v, err == nil
	}
	fingerprint := func(msg jetstream.Msg) uint64 { return uint64(len(msg.Data())) + 1 }
	reg := prometheus.NewRegistry()
	for i := range 20 {
		e.publish(t, "ok", KeyHeader, fmt.Sprintf("ok-%d", i), "Correlation-Id", fmt.Sprintf("corr-%d", i))
	}
	e.publish(t, "ok", KeyHeader, "dup")
	e.publish(t, "ok", KeyHeader, "dup")
	e.publish(t, "flaky", KeyHeader, "flaky")
	e.publish(t, "poison", KeyHeader, "poison")
	e.publish(t, "no key")
	consume(t, e.consumer(t, e.js), e.grid, h, WithConcurrency(64), WithKey(requireHeader), WithEntity(version),
		WithFingerprint(fingerprint), WithDeadLetter(e.js, e.name+".dlq"), WithRegisterer(reg))
	testwait.For(t, 20*time.Second, "every message settled", func() bool {
		return eff.Get("flaky") == 1 && eff.Get("ok-19") == 1 && e.deadLetters(t) == 2 &&
			adaptertest.Counted(t, reg, "jetstream", adapter.Duplicate, adapter.Ack) == 1
	}, func() string { return fmt.Sprintf("effects %v, dead letters %d", eff, e.deadLetters(t)) })

	// A key reused for another payload, then an entity's older version.
	e.publish(t, "ok but longer", KeyHeader, "ok-3")
	e.publish(t, "set", KeyHeader, "balance-v2", "Version", "2")
	testwait.For(t, 20*time.Second, "the mismatch set aside and version 2 applied", func() bool {
		return e.deadLetters(t) == 3 && eff.Get("balance-v2") == 1
	})
	e.publish(t, "set", KeyHeader, "balance-v1", "Version", "1")
	testwait.For(t, 20*time.Second, "version 1 settled as stale", func() bool { return adaptertest.Counted(t, reg, "jetstream", adapter.Stale, adapter.Ack) == 1 })

	for i := range 20 {
		if n := eff.Get(fmt.Sprintf("ok-%d", i)); n != 1 {
			t.Errorf("ok-%d applied %d times", i, n)
		}
	}
	if eff.Get("dup") != 1 || eff.Get("balance-v1") != 0 {
		t.Errorf("dup applied %d times (want 1), the stale version %d (want 0)", eff.Get("dup"), eff.Get("balance-v1"))
	}
	if got := eff.Correlation("ok-3"); got != "corr-3" {
		t.Errorf("the handler's context carried correlation id %q, want corr-3", got)
	}
	for _, want := range []struct {
		o adapter.Outcome
		a adapter.Action
		n float64
	}{
		{adapter.Completed, adapter.Ack, 23}, {adapter.Failed, adapter.Retry, 1}, {adapter.Poisoned, adapter.DeadLetter, 1},
		{adapter.NoKey, adapter.DeadLetter, 1}, {adapter.Mismatch, adapter.DeadLetter, 1},
	} {
		if got := adaptertest.Counted(t, reg, "jetstream", want.o, want.a); got != want.n {
			t.Errorf("messages %s/%s = %v, want %v", want.o, want.a, got, want.n)
		}
	}
	dl, err := e.stream.GetLastMsgForSubject(context.Background(), e.name+".dlq")
	if err != nil {
		t.Fatal(err)
	}
	if r := dl.Header.Get(ReasonHeader); !strings.HasPrefix(r, "mismatch") {
		t.Errorf("the last dead letter's reason is %q, want the mismatch", r)
	}
}

// A consumer that dies in the middle of a handler leaves the key leased and
// the message unacked. JetStream redelivers it after the ack wait; the grid
// answers BUSY while the lease runs, so it is delivered again after the
// retry-after, and the second consumer takes the key over with a larger
// token and applies it once.
func TestCrashMidHandlerIsTakenOver(t *testing.T) {
	e := setup(t, time.Second)
	eff := adaptertest.NewEffects()
	ncA, err := nats.Connect(natsURL())
	if err != nil {
		t.Fatal(err)
	}
	jsA, err := jetstream.New(ncA)
	if err != nil {
		t.Fatal(err)
	}
	cA := adaptertest.Dial(t, e.node)
	entered := make(chan client.Lease, 1)
	lease := client.WithLease(2 * time.Second)
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() {
		doneA <- Consume(ctxA, e.consumer(t, jsA), cA, "test", func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
			entered <- l
			<-ctx.Done()
			return nil, ctx.Err()
		}, WithConcurrency(1), WithProcessOptions(lease))
	}()
	e.publish(t, "pay", KeyHeader, "payment-1")
	var first client.Lease
	select {
	case first = <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first consumer never ran the handler")
	}
	// "kill -9": the grid client stops extending the lease, the NATS
	// connection goes, the message stays unacked. Consume may see the
	// connection go first and say so; either way it returns.
	cA.Close()
	ncA.Close()
	cancelA()
	<-doneA

	reg := prometheus.NewRegistry()
	consume(t, e.consumer(t, e.js), e.grid, func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
		eff.Add(ctx, l)
		return nil, nil
	}, WithProcessOptions(lease), WithRegisterer(reg))
	testwait.For(t, 30*time.Second, "the payment applied by the second consumer", func() bool { return eff.Get("payment-1") == 1 })
	second := eff.FirstToken("payment-1")
	if second <= first.Token {
		t.Fatalf("takeover token %d, want more than the crashed holder's %d", second, first.Token)
	}
	if testwait.Holds(500*time.Millisecond, func() bool { return eff.Get("payment-1") > 1 }) {
		t.Fatalf("payment applied %d times", eff.Get("payment-1"))
	}
}

// A handler that runs longer than the consumer's ack wait keeps its message
// (InProgress): JetStream does not deliver it again meanwhile.
func TestLongHandlerKeepsItsMessage(t *testing.T) {
	e := setup(t, 600*time.Millisecond)
	deliveries := make(chan uint64, 10)
	consume(t, e.consumer(t, e.js), e.grid, func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
		md, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		deliveries <- md.NumDelivered
		select {
		case <-time.After(2 * time.Second): // three ack waits of work
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	}, WithProcessOptions(client.WithLease(5*time.Second)))
	e.publish(t, "slow", KeyHeader, "slow-1")
	if n := <-deliveries; n != 1 {
		t.Fatalf("first run on delivery %d", n)
	}
	info := func() *jetstream.ConsumerInfo {
		c := e.consumer(t, e.js)
		i, err := c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	testwait.For(t, 20*time.Second, "the message acked", func() bool {
		i := info()
		return i.NumAckPending == 0 && i.NumPending == 0
	})
	select {
	case n := <-deliveries:
		t.Fatalf("the message was delivered again (delivery %d) while its handler ran", n)
	default:
	}
}

// Stopping a consumer releases the keys its handlers hold and hands their
// messages back without counting an attempt. (A pull request of the stopped
// consumer may take a handed-back message on the server; the short ack wait
// brings it back soon.)
func TestShutdownHandsMessagesBack(t *testing.T) {
	e := setup(t, 2*time.Second)
	const msgs = 5
	for i := range msgs {
		e.publish(t, "pay", KeyHeader, fmt.Sprintf("m-%d", i))
	}
	var running sync.WaitGroup
	running.Add(msgs)
	stop := consume(t, e.consumer(t, e.js), e.grid, func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
		running.Done()
		<-ctx.Done()
		return nil, ctx.Err()
	}, WithConcurrency(msgs))
	running.Wait()
	if err := stop(); err != nil {
		t.Fatalf("Consume after its context ended: %v, want nil", err)
	}
	attempts := make(chan int, msgs)
	consume(t, e.consumer(t, e.js), e.grid, func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
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
