package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	"github.com/l4xg/grid/client/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// These tests run on kfake, an in-process Kafka cluster that speaks the
// real protocol, and a real grid node.

const (
	topic = "payments"
	dlq   = "payments.dlq"
	group = "ledger"
)

// harness runs the conformance suite on a kfake cluster of its own per
// scenario. Lanes are partitions.
var harness = adaptertest.Harness{
	Name: "kafka",
	Open: func(t *testing.T, _ time.Duration) adaptertest.Broker { return setup(t) },
	// The record without a header is the fourth of partition 1: its
	// offset is its key.
	Keyless:    topic + "/1/3",
	Rewinds:    9,
	SerialKeys: true,
}

func TestConformance(t *testing.T) { adaptertest.Run(t, harness) }

type env struct {
	seeds []string
	prod  *kgo.Client
	adm   *kadm.Client
	dlc   *kgo.Client // reads the dead-letter topic
	dead  []*kgo.Record
}

func setup(t *testing.T) *env {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic, dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	dlc, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dlc.Close)
	return &env{seeds: seeds, prod: prod, adm: kadm.NewClient(prod), dlc: dlc}
}

// consumerClient is a group consumer as the package asks for.
func (e *env) consumerClient(t *testing.T) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Publish produces m to partition m.Lane, its key, correlation id and
// version in headers.
func (e *env) Publish(t *testing.T, m adaptertest.Message) {
	t.Helper()
	r := &kgo.Record{Topic: topic, Partition: int32(m.Lane), Value: []byte(m.Body)}
	for _, h := range [][2]string{{kafka.KeyHeader, m.Key}, {"correlation-id", m.Correlation}, {"version", version(m)}} {
		if h[1] != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
		}
	}
	if err := e.prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func version(m adaptertest.Message) string {
	if m.Version == 0 {
		return ""
	}
	return fmt.Sprint(m.Version)
}

// Consumer is Consume on a group client of its own; cut closes the client.
// It closes it in the background: with kgo.BlockRebalanceOnPoll, Close
// leaves the group only once the poll in hand is settled, which for a
// consumer that dies mid-handler is when its grid client is gone and the
// handler gives up (its record is then rewound, not committed).
func (e *env) Consumer(t *testing.T, cfg adaptertest.Config) (func(context.Context) error, func()) {
	t.Helper()
	cl := e.consumerClient(t)
	closed := make(chan struct{})
	cut := sync.OnceFunc(func() { go func() { cl.Close(); close(closed) }() })
	t.Cleanup(func() {
		cut()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Error("the Kafka client did not close within 30s")
		}
	})
	opts := []kafka.Option{kafka.WithDeadLetterTopic(dlq), kafka.WithFingerprint(func(r *kgo.Record) uint64 { return adaptertest.Fingerprint(r.Value) }),
		kafka.WithEntity(func(r *kgo.Record) (string, uint64, bool) {
			var v uint64
			_, err := fmt.Sscan(header(r, "version"), &v)
			return adaptertest.Entity, v, err == nil
		})}
	if cfg.Lease > 0 {
		opts = append(opts, kafka.WithProcessOptions(client.WithLease(cfg.Lease)))
	}
	if cfg.InFlight > 0 {
		opts = append(opts, kafka.WithMaxPoll(cfg.InFlight))
	}
	opts = append(opts, kafka.WithStopGrace(cfg.StopGrace))
	if cfg.Registerer != nil {
		opts = append(opts, kafka.WithRegisterer(cfg.Registerer))
	}
	h := func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) {
		return nil, cfg.Handler(ctx, string(r.Value), l)
	}
	return func(ctx context.Context) error {
		return kafka.Consume(ctx, cl, cfg.Grid, adaptertest.Namespace, h, opts...)
	}, cut
}

// Pending is how many records of the topic the group has not committed
// past.
func (e *env) Pending(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := e.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = kadm.OffsetResponses{}, nil // nothing committed yet
	}
	if err != nil {
		t.Fatal(err)
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(o.Topic, o.Partition)
		at := int64(0)
		if ok {
			at = c.At
		}
		lag += o.Offset - at
	})
	return int(lag)
}

// DeadLetters reads the dead-letter topic up to its end.
func (e *env) DeadLetters(t *testing.T) []adaptertest.DeadLetter {
	t.Helper()
	ends, err := e.adm.ListEndOffsets(context.Background(), dlq)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for int64(len(e.dead)) < want && ctx.Err() == nil {
		e.dead = append(e.dead, e.dlc.PollFetches(ctx).Records()...)
	}
	var out []adaptertest.DeadLetter
	for _, r := range e.dead {
		out = append(out, adaptertest.DeadLetter{Body: string(r.Value), Reason: header(r, kafka.ReasonHeader)})
	}
	return out
}

// A client that commits by itself, that is not in a group, or that lets a
// rebalance take partitions while a poll is processed, is refused.
func TestConsumeRefusesAutoCommit(t *testing.T) {
	e := setup(t)
	grid, _ := adaptertest.Grid(t)
	for name, opts := range map[string][]kgo.Opt{
		"auto-commit":              {kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic)},
		"no group":                 {kgo.ConsumeTopics(topic)},
		"rebalances during a poll": {kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit()},
	} {
		cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(e.seeds...))...)
		if err != nil {
			t.Fatal(err)
		}
		err = kafka.Consume(context.Background(), cl, grid, "test", func(context.Context, *kgo.Record, client.Lease) ([]byte, error) { return nil, nil })
		cl.Close()
		if err == nil {
			t.Errorf("%s: Consume started", name)
		}
	}
}

// header returns the value of r's header name, or "".
func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}
