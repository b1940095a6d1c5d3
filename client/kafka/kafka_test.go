package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/adaptertest"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
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

type env struct {
	seeds []string
	prod  *kgo.Client
	adm   *kadm.Client
	node  *gridtest.Node
	grid  *client.Client
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
	n := gridtest.Start(t)
	return &env{seeds: seeds, prod: prod, adm: kadm.NewClient(prod), node: n, grid: adaptertest.Dial(t, n)}
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

// produce sends a record to partition p with headers (name, value pairs).
func (e *env) produce(t *testing.T, p int32, value string, headers ...string) {
	t.Helper()
	r := &kgo.Record{Topic: topic, Partition: p, Value: []byte(value)}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	if err := e.prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// lag is how many records of the topic the group has not committed past.
func (e *env) lag(t *testing.T) int64 {
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
	return lag
}

// deadLetters reads the dead-letter topic.
func (e *env) deadLetters(t *testing.T) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := e.adm.ListEndOffsets(context.Background(), dlq)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for int64(len(out)) < want && ctx.Err() == nil {
		out = append(out, cl.PollFetches(ctx).Records()...)
	}
	return out
}

func consume(t *testing.T, cl *kgo.Client, c *client.Client, h Handler, opts ...Option) (stop func() error) {
	t.Helper()
	return adaptertest.Run(t, func(ctx context.Context) error { return Consume(ctx, cl, c, "test", h, opts...) })
}

// Every outcome row in few polls: completed, a duplicate (one header key
// on two records of one poll: the second answers DUPLICATE), a retryable
// failure in the middle of a partition (the partition pauses, is
// rewound to it, and the records after it answer DUPLICATE when they come
// again), a poisoned record, a reused key (MISMATCH) and an older entity
// version (STALE); the dead letters go to their topic with the reason, and
// the group commits everything.
func TestOutcomes(t *testing.T) {
	e := setup(t)
	eff := adaptertest.NewEffects()
	var flaky sync.Once
	h := func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) {
		switch string(r.Value) {
		case "poison":
			return nil, client.Poison(errors.New("unparseable payment"))
		case "flaky":
			failed := false
			flaky.Do(func() { failed = true })
			if failed {
				return nil, client.RetryAfter(errors.New("ledger busy"), 100*time.Millisecond)
			}
		}
		eff.Add(ctx, l)
		return nil, nil
	}
	version := func(r *kgo.Record) (string, uint64, bool) {
		var v uint64
		_, err := fmt.Sscan(header(r, "version"), &v)
		return "account-7", v, err == nil
	}
	fingerprint := func(r *kgo.Record) uint64 { return uint64(len(r.Value)) + 1 }
	for i := range 10 {
		e.produce(t, 0, "ok", KeyHeader, fmt.Sprintf("ok-%d", i), "correlation-id", fmt.Sprintf("corr-%d", i))
	}
	e.produce(t, 0, "flaky", KeyHeader, "flaky")
	for i := 10; i < 20; i++ {
		e.produce(t, 0, "ok", KeyHeader, fmt.Sprintf("ok-%d", i))
	}
	e.produce(t, 1, "ok", KeyHeader, "dup")
	e.produce(t, 1, "ok", KeyHeader, "dup")
	e.produce(t, 1, "poison", KeyHeader, "poison")
	e.produce(t, 1, "no header: the offset is the key")
	e.produce(t, 1, "set", KeyHeader, "balance-v2", "version", "2")
	reg := prometheus.NewRegistry()
	consume(t, e.consumerClient(t), e.grid, h, WithEntity(version), WithFingerprint(fingerprint),
		WithDeadLetterTopic(dlq), WithRegisterer(reg))
	testwait.For(t, 20*time.Second, "everything committed", func() bool { return e.lag(t) == 0 },
		func() string { return fmt.Sprintf("lag %d, effects %v", e.lag(t), eff) })
	e.produce(t, 1, "ok but longer", KeyHeader, "ok-3")
	e.produce(t, 1, "set", KeyHeader, "balance-v1", "version", "1")
	testwait.For(t, 20*time.Second, "the mismatch and the stale version committed", func() bool { return e.lag(t) == 0 })

	for i := range 20 {
		if n := eff.Get(fmt.Sprintf("ok-%d", i)); n != 1 {
			t.Errorf("ok-%d applied %d times", i, n)
		}
	}
	for key, want := range map[string]int{"dup": 1, "flaky": 1, "balance-v2": 1, "balance-v1": 0, "payments/1/3": 1} {
		if n := eff.Get(key); n != want {
			t.Errorf("%s applied %d times, want %d", key, n, want)
		}
	}
	if got := eff.Correlation("ok-3"); got != "corr-3" {
		t.Errorf("the handler's context carried correlation id %q, want corr-3", got)
	}
	for _, want := range []struct {
		o adapter.Outcome
		a adapter.Action
		n float64
	}{
		{adapter.Failed, adapter.Retry, 1}, {adapter.Poisoned, adapter.DeadLetter, 1},
		{adapter.Mismatch, adapter.DeadLetter, 1},
	} {
		if got := adaptertest.Counted(t, reg, "kafka", want.o, want.a); got != want.n {
			t.Errorf("records %s/%s = %v, want %v", want.o, want.a, got, want.n)
		}
	}
	// The second "dup" of its poll ran after the first: DUPLICATE, not BUSY.
	if got := adaptertest.Counted(t, reg, "kafka", adapter.Busy, adapter.Retry); got != 0 {
		t.Errorf("BUSY %v times; records of one key in one poll must not race", got)
	}
	// The records after the failed one came again and answered DUPLICATE
	// (or, for an entity's own version, STALE).
	if got := adaptertest.Counted(t, reg, "kafka", adapter.Duplicate, adapter.Ack); got < 1+9 {
		t.Errorf("duplicates %v, want the second dup and the nine records refetched after the failure", got)
	}
	if got := adaptertest.Counted(t, reg, "kafka", adapter.Stale, adapter.Ack); got < 1 {
		t.Errorf("stale records %v, want version 1 at least", got)
	}
	dls := e.deadLetters(t)
	var reasons []string
	for _, r := range dls {
		reasons = append(reasons, header(r, ReasonHeader))
	}
	all := strings.Join(reasons, "|")
	if len(dls) != 2 || !strings.Contains(all, "poisoned") || !strings.Contains(all, "mismatch") {
		t.Errorf("dead letters %d with reasons %q, want the poisoned and the mismatched one", len(dls), reasons)
	}
}

// A consumer that dies in the middle of a handler (its clients gone before
// any commit) leaves the key leased and the record uncommitted. The group
// gives the partition to the next consumer, which fetches the record
// again: BUSY while the lease runs, then it takes the key over with a
// larger token and applies it once.
func TestCrashMidHandlerIsTakenOver(t *testing.T) {
	e := setup(t)
	eff := adaptertest.NewEffects()
	clA := e.consumerClient(t)
	cA := adaptertest.Dial(t, e.node)
	entered := make(chan client.Lease, 1)
	lease := client.WithLease(time.Second)
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() {
		doneA <- Consume(ctxA, clA, cA, "test", func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) {
			entered <- l
			<-ctx.Done()
			return nil, ctx.Err()
		}, WithProcessOptions(lease))
	}()
	e.produce(t, 0, "pay", KeyHeader, "payment-1")
	var first client.Lease
	select {
	case first = <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first consumer never ran the handler")
	}
	// "kill -9": the grid client stops extending; the Kafka client leaves
	// the group without committing.
	cA.Close()
	clA.Close()
	cancelA()
	<-doneA

	reg := prometheus.NewRegistry()
	consume(t, e.consumerClient(t), e.grid, func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) {
		eff.Add(ctx, l)
		return nil, nil
	}, WithProcessOptions(lease), WithRegisterer(reg))
	testwait.For(t, 30*time.Second, "the payment applied by the second consumer", func() bool { return eff.Get("payment-1") == 1 })
	second := eff.FirstToken("payment-1")
	if second <= first.Token {
		t.Fatalf("takeover token %d, want more than the crashed holder's %d", second, first.Token)
	}
	testwait.For(t, 20*time.Second, "the record committed", func() bool { return e.lag(t) == 0 })
}

// Stopping a consumer releases the keys its handlers hold and commits none
// of their records: the next consumer runs each as attempt 1.
func TestShutdownHandsRecordsBack(t *testing.T) {
	e := setup(t)
	const recs = 5
	for i := range recs {
		e.produce(t, int32(i%2), "pay", KeyHeader, fmt.Sprintf("m-%d", i))
	}
	var running sync.WaitGroup
	running.Add(recs)
	first := e.consumerClient(t)
	stop := consume(t, first, e.grid, func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) {
		running.Done()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	running.Wait()
	if err := stop(); err != nil {
		t.Fatalf("Consume after its context ended: %v, want nil", err)
	}
	if lag := e.lag(t); lag != recs {
		t.Fatalf("lag after shutdown %d, want all %d records uncommitted", lag, recs)
	}
	first.Close() // leaves the group, which gives its partitions to the next consumer
	attempts := make(chan int, recs)
	consume(t, e.consumerClient(t), e.grid, func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) {
		attempts <- l.Attempt
		return nil, nil
	})
	for range recs {
		select {
		case a := <-attempts:
			if a != 1 {
				t.Fatalf("a handed-back record ran as attempt %d, want 1", a)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the handed-back records did not come back")
		}
	}
}

// A client that commits by itself, or that is not in a group, is refused.
func TestConsumeRefusesAutoCommit(t *testing.T) {
	e := setup(t)
	for name, opts := range map[string][]kgo.Opt{
		"auto-commit": {kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic)},
		"no group":    {kgo.ConsumeTopics(topic)},
	} {
		cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(e.seeds...))...)
		if err != nil {
			t.Fatal(err)
		}
		err = Consume(context.Background(), cl, e.grid, "test", func(context.Context, *kgo.Record, client.Lease) ([]byte, error) { return nil, nil })
		cl.Close()
		if err == nil {
			t.Errorf("%s: Consume started", name)
		}
	}
}
