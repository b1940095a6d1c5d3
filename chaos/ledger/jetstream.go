package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/l4xg/grid/client"
	gridjs "github.com/l4xg/grid/client/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsDurable is the name of the payments' durable pull consumer, which
// every consumer process pulls from.
const jsDurable = "consumers"

// jsBroker is the run's streams on the NATS server: "<name>" captures the
// payments' subject "<name>.in", which the durable pull consumer
// jsDurable consumes with an ack wait of cfg.ackWait and a delivery
// budget of cfg.deliveryLimit (MaxDeliver); "<name>-dlq" captures the
// adapter's dead letters, "<name>.dlq" (jetstream.WithDeadLetter). A
// message that runs out of its deliveries is given up by JetStream with
// no copy anywhere, only an advisory, which the run listens to.
type jsBroker struct {
	url    string
	name   string
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	dlq    jetstream.Stream
	read   uint64 // the dead-letter stream's messages read
	adv    *nats.Subscription

	mu        sync.Mutex
	exhausted []maxDeliveries // advisories not yet read
}

var _ broker = (*jsBroker)(nil)

// maxDeliveries is JetStream's advisory that a message ran out of its
// deliveries.
type maxDeliveries struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

func openJetStream(ctx context.Context, cfg Config, name string) (*jsBroker, error) {
	nc, err := nats.Connect(cfg.natsURL)
	if err != nil {
		return nil, fmt.Errorf("ledger: NATS at %s: %w", cfg.natsURL, err)
	}
	b := &jsBroker{url: cfg.natsURL, name: name, nc: nc}
	if err := b.create(ctx, cfg); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// create makes the streams and the consumer, and subscribes to the
// consumer's max-deliveries advisories.
func (b *jsBroker) create(ctx context.Context, cfg Config) error {
	js, err := jetstream.New(b.nc)
	if err != nil {
		return err
	}
	b.js = js
	if b.stream, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: b.name, Subjects: []string{b.name + ".in"}, Storage: jetstream.MemoryStorage,
	}); err != nil {
		return fmt.Errorf("ledger: create stream (is JetStream on?): %w", err)
	}
	if b.dlq, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: b.name + "-dlq", Subjects: []string{b.name + ".dlq"}, Storage: jetstream.MemoryStorage,
	}); err != nil {
		return fmt.Errorf("ledger: create stream: %w", err)
	}
	if _, err := b.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: jsDurable, FilterSubject: b.name + ".in", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: cfg.ackWait, MaxDeliver: cfg.deliveryLimit,
	}); err != nil {
		return fmt.Errorf("ledger: create consumer: %w", err)
	}
	b.adv, err = b.nc.Subscribe(fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", b.name, jsDurable), func(m *nats.Msg) {
		var a maxDeliveries
		if json.Unmarshal(m.Data, &a) == nil {
			b.mu.Lock()
			b.exhausted = append(b.exhausted, a)
			b.mu.Unlock()
		}
	})
	if err == nil {
		err = b.nc.Flush()
	}
	return err
}

func (b *jsBroker) consumerArgs() []string {
	return []string{"--broker-addr", b.url, "--queue", b.name}
}

// publish publishes the payments, 256 at a time, each acknowledged by the
// stream. The key goes in Idempotency-Key, not Nats-Msg-Id: the stream
// would drop the producer's duplicates as its own.
func (b *jsBroker) publish(ctx context.Context, ps []payment) error {
	for len(ps) > 0 {
		n := min(len(ps), 256)
		acks := make([]jetstream.PubAckFuture, 0, n)
		for _, p := range ps[:n] {
			m := nats.NewMsg(b.name + ".in")
			m.Header.Set(gridjs.KeyHeader, p.key)
			m.Header.Set("Correlation-Id", "corr-"+p.key)
			m.Data = []byte(p.body)
			a, err := b.js.PublishMsgAsync(m)
			if err != nil {
				return fmt.Errorf("ledger: publish: %w", err)
			}
			acks = append(acks, a)
		}
		for _, a := range acks {
			select {
			case <-a.Ok():
			case err := <-a.Err():
				return fmt.Errorf("ledger: publish: %w", err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ps = ps[n:]
	}
	return nil
}

// pending is what the consumer has not delivered yet or has not had
// acked. A message given up after its deliveries leaves the count at its
// next redelivery.
func (b *jsBroker) pending(ctx context.Context) (int, error) {
	c, err := b.stream.Consumer(ctx, jsDurable)
	if err != nil {
		return 0, err
	}
	i, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(i.NumPending) + i.NumAckPending, nil
}

// deadLetters reads the dead-letter stream from where it stopped, and the
// messages JetStream gave up since the last call (their keys from the
// payments' stream).
func (b *jsBroker) deadLetters(ctx context.Context) ([]deadLetter, error) {
	info, err := b.dlq.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []deadLetter
	for ; b.read < info.State.LastSeq; b.read++ {
		m, err := b.dlq.GetMsg(ctx, b.read+1)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, deadLetter{key: m.Header.Get(gridjs.KeyHeader), reason: gridReason(m.Header.Get(gridjs.ReasonHeader))})
	}
	b.mu.Lock()
	exhausted := b.exhausted
	b.exhausted = nil
	b.mu.Unlock()
	for _, a := range exhausted {
		m, err := b.stream.GetMsg(ctx, a.StreamSeq)
		if err != nil {
			return nil, fmt.Errorf("ledger: the message JetStream gave up (sequence %d): %w", a.StreamSeq, err)
		}
		out = append(out, deadLetter{key: m.Header.Get(gridjs.KeyHeader), dropped: true,
			reason: fmt.Sprintf("broker: max deliveries (%d)", a.Deliveries)})
	}
	return out, nil
}

// close deletes the streams (and with them the consumer).
func (b *jsBroker) close() {
	defer b.nc.Close()
	if b.adv != nil {
		_ = b.adv.Unsubscribe()
	}
	if b.js == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []string{b.name, b.name + "-dlq"} {
		_ = b.js.DeleteStream(ctx, s)
	}
}

// consumeJetStream pulls from the durable consumer through
// client/jetstream, f.prefetch messages at once, dead letters to
// "<queue>.dlq".
func consumeJetStream(ctx context.Context, grid *client.Client, f consumerFlags, pay payFunc) error {
	nc, err := nats.Connect(f.addr)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, f.queue, jsDurable)
	if err != nil {
		return fmt.Errorf("jetstream: consumer: %w", err)
	}
	h := func(ctx context.Context, m jetstream.Msg, l client.Lease) ([]byte, error) {
		return pay(ctx, m.Data(), l)
	}
	return gridjs.Consume(ctx, cons, grid, namespace, h,
		gridjs.WithConcurrency(f.prefetch), gridjs.WithDeadLetter(js, f.queue+".dlq"),
		gridjs.WithProcessOptions(client.WithLease(f.lease)))
}
