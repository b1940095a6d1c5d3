package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	gridjs "github.com/l4xg/grid/client/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// harness runs the conformance suite on a stream of its own per scenario.
var harness = adaptertest.Harness{
	Name:       "jetstream",
	Open:       func(t *testing.T, ackWait time.Duration) adaptertest.Broker { return setup(t, ackWait) },
	Redelivers: true,
	// Drain leaves the iterator's pull request open on the server for a
	// moment: a message handed back then is delivered to it, and comes
	// back only after the ack wait.
	StrayDeliveries: true,
}

func TestConformance(t *testing.T) { adaptertest.Run(t, harness) }

// env is a stream of the test's own ("<name>.in" and "<name>.dlq") and a
// durable consumer of its input, with ackWait.
type env struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	name   string
	read   uint64                   // the stream's messages DeadLetters has read
	dead   []adaptertest.DeadLetter // those on the dead-letter subject
}

func connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(natsURL())
	if err != nil {
		if os.Getenv("GRID_TEST_BROKERS") == "required" {
			t.Fatalf("NATS at %s: %v", natsURL(), err)
		}
		t.Skipf("no NATS at %s (%v); GRID_TEST_BROKERS=required makes this a failure", natsURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func setup(t *testing.T, ackWait time.Duration) *env {
	t.Helper()
	js, err := jetstream.New(connect(t))
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
	return &env{js: js, stream: st, name: name}
}

// Publish sends m to the input subject, its key, correlation id and
// version in headers, and waits for the stream to store it.
func (e *env) Publish(t *testing.T, m adaptertest.Message) {
	t.Helper()
	msg := nats.NewMsg(e.name + ".in")
	msg.Data = []byte(m.Body)
	for _, h := range [][2]string{{gridjs.KeyHeader, m.Key}, {"Correlation-Id", m.Correlation}} {
		if h[1] != "" {
			msg.Header.Set(h[0], h[1])
		}
	}
	if m.Version != 0 {
		msg.Header.Set("Version", fmt.Sprint(m.Version))
	}
	if _, err := e.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// Consumer is Consume on a NATS connection of its own, which cut closes.
// A message without an Idempotency-Key is dead-lettered.
func (e *env) Consumer(t *testing.T, cfg adaptertest.Config) (func(context.Context) error, func()) {
	t.Helper()
	nc := connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(context.Background(), e.name, "in")
	if err != nil {
		t.Fatal(err)
	}
	opts := []gridjs.Option{gridjs.WithDeadLetter(js, e.name+".dlq"),
		gridjs.WithKey(func(msg jetstream.Msg) (string, error) {
			if k := msg.Headers().Get(gridjs.KeyHeader); k != "" {
				return k, nil
			}
			return "", errors.New("no Idempotency-Key")
		}),
		gridjs.WithFingerprint(func(msg jetstream.Msg) uint64 { return adaptertest.Fingerprint(msg.Data()) }),
		gridjs.WithEntity(func(msg jetstream.Msg) (string, uint64, bool) {
			var v uint64
			_, err := fmt.Sscan(msg.Headers().Get("Version"), &v)
			return adaptertest.Entity, v, err == nil
		})}
	if cfg.Lease > 0 {
		opts = append(opts, gridjs.WithProcessOptions(client.WithLease(cfg.Lease)))
	}
	if cfg.InFlight > 0 {
		opts = append(opts, gridjs.WithConcurrency(cfg.InFlight))
	}
	opts = append(opts, gridjs.WithStopGrace(cfg.StopGrace))
	if cfg.Registerer != nil {
		opts = append(opts, gridjs.WithRegisterer(cfg.Registerer))
	}
	h := func(ctx context.Context, msg jetstream.Msg, l client.Lease) ([]byte, error) {
		return nil, cfg.Handler(ctx, string(msg.Data()), l)
	}
	return func(ctx context.Context) error {
		return gridjs.Consume(ctx, cons, cfg.Grid, adaptertest.Namespace, h, opts...)
	}, nc.Close
}

// Pending is how many messages the durable consumer has not delivered
// or has not had acked. A server that rewinds its delivery cursor to a
// message Nak'd (2.9 does, for the last one delivered) counts that message
// in both.
func (e *env) Pending(t *testing.T) int {
	t.Helper()
	c, err := e.js.Consumer(context.Background(), e.name, "in")
	if err != nil {
		t.Fatal(err)
	}
	i, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(i.NumPending) + i.NumAckPending
}

// DeadLetters reads the dead-letter subject, from where it stopped last.
func (e *env) DeadLetters(t *testing.T) []adaptertest.DeadLetter {
	t.Helper()
	ctx := context.Background()
	info, err := e.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ; e.read < info.State.LastSeq; e.read++ {
		m, err := e.stream.GetMsg(ctx, e.read+1)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == e.name+".dlq" {
			e.dead = append(e.dead, adaptertest.DeadLetter{Body: string(m.Data), Reason: m.Header.Get(gridjs.ReasonHeader)})
		}
	}
	return e.dead
}
