package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	gridjs "github.com/l4xg/grid/client/jetstream"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// These tests run against the NATS server with JetStream on 127.0.0.1:4222
// (or GRID_TEST_NATS_URL), like the conformance suite, on streams of their
// own whose consumer gives each message few deliveries (MaxDeliver).

// busyStream is a stream of the test's own with a durable consumer "in"
// of its "<name>.in" subject.
type busyStream struct {
	js   jetstream.JetStream
	name string
}

func busyConnect(t *testing.T) *nats.Conn {
	t.Helper()
	url := os.Getenv("GRID_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url)
	if err != nil {
		if os.Getenv("GRID_TEST_BROKERS") == "required" {
			t.Fatalf("NATS at %s: %v", url, err)
		}
		t.Skipf("no NATS at %s (%v); GRID_TEST_BROKERS=required makes this a failure", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newBusyStream(t *testing.T, ackWait time.Duration, maxDeliver int) *busyStream {
	t.Helper()
	js, err := jetstream.New(busyConnect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := fmt.Sprintf("gridbusy%x", rand.Uint32())
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatalf("create stream (is JetStream on?): %v", err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	if _, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "in", FilterSubject: name + ".in", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: ackWait, MaxDeliver: maxDeliver,
	}); err != nil {
		t.Fatal(err)
	}
	return &busyStream{js: js, name: name}
}

func (s *busyStream) publish(t *testing.T, key, body string) {
	t.Helper()
	msg := nats.NewMsg(s.name + ".in")
	msg.Header.Set(gridjs.KeyHeader, key)
	msg.Data = []byte(body)
	if _, err := s.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

func (s *busyStream) pending(t *testing.T) int {
	t.Helper()
	c, err := s.js.Consumer(context.Background(), s.name, "in")
	if err != nil {
		t.Fatal(err)
	}
	i, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(i.NumPending) + i.NumAckPending
}

// consume runs Consume on the stream's consumer until the test ends or
// stop is called, which returns Consume's error.
func (s *busyStream) consume(t *testing.T, grid *client.Client, h gridjs.Handler, opts ...gridjs.Option) (stop func() error) {
	t.Helper()
	cons, err := s.js.Consumer(context.Background(), s.name, "in")
	if err != nil {
		t.Fatal(err)
	}
	return adaptertest.Start(t, func(ctx context.Context) error {
		return gridjs.Consume(ctx, cons, grid, adaptertest.Namespace, h, opts...)
	})
}

// deliveries records, per body, when each delivery of a message reached
// the adapter (through its key rule, which runs once per delivery) and
// which delivery JetStream said it was.
type deliveries struct {
	mu  sync.Mutex
	at  map[string][]time.Time
	num map[string][]uint64
}

func (d *deliveries) key(msg jetstream.Msg) (string, error) {
	md, err := msg.Metadata()
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at == nil {
		d.at, d.num = map[string][]time.Time{}, map[string][]uint64{}
	}
	b := string(msg.Data())
	d.at[b] = append(d.at[b], time.Now())
	d.num[b] = append(d.num[b], md.NumDelivered)
	return gridjs.DefaultKey(msg)
}

func (d *deliveries) of(body string) ([]time.Time, []uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.at[body]), slices.Clone(d.num[body])
}

// A holder died mid-handler: its key stays PROCESSING for the rest of its
// lease (5s), far longer than the consumer's ack wait (1s), which allows
// each message 3 deliveries. The message comes to a consumer while the
// grid still answers BUSY. It must not be used up while the lease runs out
// (a Nak a second spent a delivery each, and the third ended the message
// with the key left PROCESSING): the consumer keeps it, pushing the ack
// deadline back, and takes the key over on that very delivery once the
// lease has ended.
func TestBusyMessageOutlivesTheDeadHoldersLease(t *testing.T) {
	grid, _ := adaptertest.Grid(t)
	s := newBusyStream(t, time.Second, 3)
	const lease = 5 * time.Second
	held, err := grid.Reserve(context.Background(), adaptertest.Namespace, "payment-1", client.WithLease(lease))
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("the holder's reserve: %+v, %v", held, err)
	}
	// The holder dies here: nothing extends or settles its lease.

	var d deliveries
	type run struct {
		token     uint64
		delivered uint64
	}
	runs := make(chan run, 10)
	reg := prometheus.NewRegistry()
	s.consume(t, grid, func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
		md, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		runs <- run{l.Token, md.NumDelivered}
		return nil, nil
	}, gridjs.WithKey(d.key), gridjs.WithProcessOptions(client.WithLease(lease)), gridjs.WithRegisterer(reg))
	s.publish(t, "payment-1", "pay")

	var got run
	select {
	case got = <-runs:
	case <-time.After(lease + 10*time.Second):
		_, nums := d.of("pay")
		t.Fatalf("the payment was never applied; the message reached the adapter on deliveries %v, and the key is %s",
			nums, keyState(t, grid, "payment-1"))
	}
	if got.token <= held.Token {
		t.Errorf("taken over with token %d, want more than the dead holder's %d", got.token, held.Token)
	}
	if got.delivered != 1 {
		t.Errorf("taken over on delivery %d, want the first: waiting for the lease spent deliveries", got.delivered)
	}
	testwait.For(t, 10*time.Second, "the message acked", func() bool { return s.pending(t) == 0 })
	if _, nums := d.of("pay"); len(nums) != 1 {
		t.Errorf("the message reached the adapter on deliveries %v, want only the first", nums)
	}
	if n := adaptertest.Counted(t, reg, "jetstream", adapter.Busy, adapter.Retry); n < 1 {
		t.Errorf("busy/retry counted %v times, want the waits counted", n)
	}
	if n := len(runs); n != 0 {
		t.Errorf("the handler ran %d more times", n)
	}
}

// since returns how long after t0 each of at was, to the millisecond.
func since(t0 time.Time, at []time.Time) []time.Duration {
	out := make([]time.Duration, len(at))
	for i, a := range at {
		out[i] = a.Sub(t0).Round(time.Millisecond)
	}
	return out
}

func keyState(t *testing.T, grid *client.Client, key string) string {
	t.Helper()
	g, err := grid.Get(context.Background(), adaptertest.Namespace, key)
	if err != nil {
		return err.Error()
	}
	return g.State.String()
}

// A holder that is alive and keeps the key longer than WithBusyHold: the
// BUSY message is kept for the hold, then handed back until the holder's
// lease ends (one delivery for the lease, not one a second), and meanwhile
// the consumer's only slot runs the next message.
func TestBusyMessageIsHandedBackAfterTheHold(t *testing.T) {
	grid, _ := adaptertest.Grid(t)
	s := newBusyStream(t, time.Second, 5)
	const lease = 4 * time.Second
	t0 := time.Now()
	held, err := grid.Reserve(context.Background(), adaptertest.Namespace, "payment-2", client.WithLease(lease))
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("the holder's reserve: %+v, %v", held, err)
	}

	var d deliveries
	applied := make(chan string, 10)
	reg := prometheus.NewRegistry()
	s.consume(t, grid, func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
		applied <- l.Key
		return nil, nil
	}, gridjs.WithKey(d.key), gridjs.WithConcurrency(1), gridjs.WithBusyHold(500*time.Millisecond), gridjs.WithRegisterer(reg))
	s.publish(t, "payment-2", "busy")
	s.publish(t, "payment-3", "other")

	select {
	case k := <-applied:
		if k != "payment-3" {
			t.Fatalf("applied %s while its holder held it", k)
		}
	case <-time.After(10 * time.Second):
		busyAt, busyNums := d.of("busy")
		otherAt, otherNums := d.of("other")
		t.Fatalf("the next message did not run while a BUSY one waited: the consumer's one slot stayed taken "+
			"(the busy message reached the adapter on deliveries %v at %v after the holder's reserve, the other on %v at %v; "+
			"payment-3 is %s)", busyNums, since(t0, busyAt), otherNums, since(t0, otherAt), keyState(t, grid, "payment-3"))
	}
	if st := keyState(t, grid, "payment-2"); st != client.StateProcessing.String() {
		t.Fatalf("payment-2 is %s, want still PROCESSING under its holder", st)
	}
	// The holder finishes: the message answers DUPLICATE when it comes back.
	if _, err := grid.Complete(context.Background(), adaptertest.Namespace, "payment-2", held.Token); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, lease+10*time.Second, "both messages acked", func() bool { return s.pending(t) == 0 })

	at, nums := d.of("busy")
	if !slices.Equal(nums, []uint64{1, 2}) {
		t.Fatalf("the busy message reached the adapter on deliveries %v, want 1 and 2", nums)
	}
	// Handed back with the holder's retry-after (about 3.5s from the
	// hand-back), not WithBusyDelay (1s): no earlier than lease - 1s from
	// the holder's reserve.
	if earliest := t0.Add(lease - time.Second); at[1].Before(earliest) {
		t.Errorf("delivered again %v after the holder's reserve, want at least %v: handed back before the lease ended",
			at[1].Sub(t0), lease-time.Second)
	}
	if n := adaptertest.Counted(t, reg, "jetstream", adapter.Duplicate, adapter.Ack); n != 1 {
		t.Errorf("duplicate/ack counted %v times, want the busy message once", n)
	}
	if n := len(applied); n != 0 {
		t.Errorf("%d more messages applied", n)
	}
}

// Stopping a consumer that keeps a BUSY message hands the message back at
// once instead of waiting for the hold.
func TestKeptBusyMessageIsHandedBackOnStop(t *testing.T) {
	grid, _ := adaptertest.Grid(t)
	s := newBusyStream(t, 30*time.Second, 5)
	held, err := grid.Reserve(context.Background(), adaptertest.Namespace, "payment-4", client.WithLease(time.Minute))
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("the holder's reserve: %+v, %v", held, err)
	}
	reg := prometheus.NewRegistry()
	stop := s.consume(t, grid, func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
		return nil, errors.New("the handler must not run")
	}, gridjs.WithRegisterer(reg), gridjs.WithBusyHold(time.Minute))
	s.publish(t, "payment-4", "busy")
	testwait.For(t, 10*time.Second, "the message kept after BUSY", func() bool {
		return adaptertest.Counted(t, reg, "jetstream", adapter.Busy, adapter.Retry) >= 1
	})
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Consume: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return within 10s of its context ending: the kept message held it")
	}
	if n := adaptertest.Counted(t, reg, "jetstream", adapter.NotStarted, adapter.Requeue); n != 1 {
		t.Errorf("not_started/requeue counted %v times, want the kept message handed back once", n)
	}
}

// TestMessageWaitingForItsTurnKeepsItsDelivery: a message that arrives
// while a message taken over from a crashed holder runs alone
// (client.Isolation) waits for its turn before its Reserve; JetStream is
// told it is being worked on meanwhile, so a wait of more than two ack
// waits spends none of its deliveries.
func TestMessageWaitingForItsTurnKeepsItsDelivery(t *testing.T) {
	grid, _ := adaptertest.Grid(t)
	const ackWait = time.Second
	s := newBusyStream(t, ackWait, 5)
	crashed, err := grid.Reserve(context.Background(), adaptertest.Namespace, "orphan", client.WithLease(200*time.Millisecond))
	if err != nil || crashed.Outcome != client.OutcomeAcquired {
		t.Fatalf("the crashed holder's reserve: %+v, %v", crashed, err)
	}
	testwait.For(t, 10*time.Second, "the crashed holder's lease expired", func() bool {
		g, err := grid.Get(context.Background(), adaptertest.Namespace, "orphan")
		return err == nil && g.Now.After(g.Deadline)
	})
	d := &deliveries{}
	delivered := func(body string) []uint64 { _, n := d.of(body); return n }
	alone := make(chan struct{})
	release := make(chan struct{})
	ran := make(chan client.Lease, 1)
	s.consume(t, grid, func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
		if l.Key == "orphan" {
			if !l.TookOverExpired {
				t.Errorf("the orphan's lease %+v, want a takeover of the expired one", l)
			}
			close(alone)
			<-release
			return nil, nil
		}
		ran <- l
		return nil, nil
	}, gridjs.WithKey(d.key), gridjs.WithConcurrency(4))
	s.publish(t, "orphan", "takeover")
	<-alone
	s.publish(t, "later", "waits")
	testwait.For(t, 10*time.Second, "the later message delivered", func() bool { return len(delivered("waits")) > 0 })
	// The orphan runs alone for more than two ack waits; the later
	// message must not run beside it, nor be delivered again.
	if testwait.Holds(2*ackWait+ackWait/2, func() bool { return len(ran) > 0 }) {
		t.Fatal("a message ran beside the one taken over from a crashed holder")
	}
	close(release)
	select {
	case l := <-ran:
		if l.Attempt != 1 {
			t.Errorf("the later message ran as attempt %d, want 1", l.Attempt)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the later message never ran")
	}
	if n := delivered("waits"); len(n) != 1 {
		t.Fatalf("the later message was delivered %v times (delivery numbers), want once: waiting for its turn spent deliveries", n)
	}
}
