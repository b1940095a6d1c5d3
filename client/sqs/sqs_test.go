package sqs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/adaptertest"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
)

// These tests run the AWS SDK's own client against fakeSQS, an endpoint of
// SQS's JSON protocol in this package (goaws speaks only the old XML
// protocol, and no other fake runs here), and a real grid node.

type env struct {
	fake *fakeSQS
	api  *awssqs.Client
	node *gridtest.Node
	grid *client.Client
}

func setup(t *testing.T) *env {
	t.Helper()
	f := newFakeSQS(t)
	api := awssqs.New(awssqs.Options{
		BaseEndpoint: aws.String(f.srv.URL), Region: "us-east-1", Credentials: aws.AnonymousCredentials{},
	})
	n := gridtest.Start(t)
	return &env{fake: f, api: api, node: n, grid: adaptertest.Dial(t, n)}
}

// send sends a message through the SDK with string attributes (name,
// value pairs).
func (e *env) send(t *testing.T, queue, body string, attrs ...string) {
	t.Helper()
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(e.fake.url(queue)), MessageBody: aws.String(body),
		MessageAttributes: map[string]types.MessageAttributeValue{}}
	for i := 0; i+1 < len(attrs); i += 2 {
		in.MessageAttributes[attrs[i]] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(attrs[i+1])}
	}
	if _, err := e.api.SendMessage(context.Background(), in); err != nil {
		t.Fatal(err)
	}
}

func (e *env) consume(t *testing.T, c *client.Client, queue string, h Handler, opts ...Option) (stop func() error) {
	t.Helper()
	opts = append([]Option{WithWait(time.Second)}, opts...)
	return adaptertest.Run(t, func(ctx context.Context) error { return Consume(ctx, e.api, e.fake.url(queue), c, "test", h, opts...) })
}

// Every outcome row in receives of 10: completed, a duplicate, a retryable
// failure made visible again after the retry-after, a poisoned message and
// one without a key sent to the dead-letter queue with the reason, a
// reused key (MISMATCH) and an older entity version (STALE); everything
// settled is deleted in batches.
func TestOutcomes(t *testing.T) {
	e := setup(t)
	eff := adaptertest.NewEffects()
	var flaky sync.Once
	h := func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
		switch aws.ToString(msg.Body) {
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
	requireKey := func(msg types.Message) (string, error) {
		if k := attribute(msg, KeyAttribute); k != "" {
			return k, nil
		}
		return "", errors.New("no idempotency-key attribute")
	}
	version := func(msg types.Message) (string, uint64, bool) {
		var v uint64
		_, err := fmt.Sscan(attribute(msg, "version"), &v)
		return "account-7", v, err == nil
	}
	fingerprint := func(msg types.Message) uint64 { return uint64(len(aws.ToString(msg.Body))) + 1 }
	for i := range 20 {
		e.send(t, "in", "ok", KeyAttribute, fmt.Sprintf("ok-%d", i), "correlation-id", fmt.Sprintf("corr-%d", i))
	}
	e.send(t, "in", "ok", KeyAttribute, "dup")
	e.send(t, "in", "ok", KeyAttribute, "dup")
	e.send(t, "in", "flaky", KeyAttribute, "flaky")
	e.send(t, "in", "poison", KeyAttribute, "poison")
	e.send(t, "in", "no key")
	e.send(t, "in", "set", KeyAttribute, "balance-v2", "version", "2")
	reg := prometheus.NewRegistry()
	e.consume(t, e.grid, "in", h, WithKey(requireKey), WithEntity(version), WithFingerprint(fingerprint),
		WithDeadLetterQueue(e.fake.url("dlq")), WithRegisterer(reg))
	testwait.For(t, 20*time.Second, "every message settled", func() bool {
		return e.fake.depth("in") == 0 && e.fake.depth("dlq") == 2
	}, func() string {
		return fmt.Sprintf("in %d, dlq %d, effects %v", e.fake.depth("in"), e.fake.depth("dlq"), eff)
	})
	e.send(t, "in", "ok but longer", KeyAttribute, "ok-3")
	e.send(t, "in", "set", KeyAttribute, "balance-v1", "version", "1")
	testwait.For(t, 20*time.Second, "the mismatch and the stale version settled", func() bool {
		return e.fake.depth("in") == 0 && e.fake.depth("dlq") == 3
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
	if got := eff.Correlation("ok-3"); got != "corr-3" {
		t.Errorf("the handler's context carried correlation id %q, want corr-3", got)
	}
	var reasons []string
	for _, m := range e.fake.messages("dlq") {
		reasons = append(reasons, m.Attrs[ReasonAttribute].StringValue)
	}
	all := strings.Join(reasons, "|")
	for _, want := range []string{"poisoned", "no_key", "mismatch"} {
		if !strings.Contains(all, want+": ") {
			t.Errorf("dead letters' reasons %q, want one %q", reasons, want)
		}
	}
	for _, want := range []struct {
		o adapter.Outcome
		a adapter.Action
		n float64
	}{{adapter.Failed, adapter.Retry, 1}, {adapter.Stale, adapter.Ack, 1}, {adapter.Completed, adapter.Ack, 23}} {
		if got := adaptertest.Counted(t, reg, "sqs", want.o, want.a); got != want.n {
			t.Errorf("messages %s/%s = %v, want %v", want.o, want.a, got, want.n)
		}
	}
}

// A consumer that dies in the middle of a handler stops extending the
// message's visibility and the key's lease. SQS delivers the message again
// once its visibility lapses; the grid answers BUSY until the lease does,
// and then the next consumer takes the key over with a larger token and
// applies it once.
func TestCrashMidHandlerIsTakenOver(t *testing.T) {
	e := setup(t)
	eff := adaptertest.NewEffects()
	cA := adaptertest.Dial(t, e.node)
	lease := client.WithLease(2 * time.Second)
	entered := make(chan client.Lease, 1)
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	apiA := &dyingAPI{API: e.api}
	go func() {
		doneA <- Consume(ctxA, apiA, e.fake.url("in"), cA, "test", func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
			entered <- l
			<-ctx.Done()
			return nil, ctx.Err()
		}, WithWait(time.Second), WithVisibility(time.Second), WithProcessOptions(lease))
	}()
	e.send(t, "in", "pay", KeyAttribute, "payment-1")
	var first client.Lease
	select {
	case first = <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first consumer never ran the handler")
	}
	// "kill -9": nothing reaches SQS or the grid from this process again.
	apiA.die()
	cA.Close()
	cancelA()
	<-doneA

	e.consume(t, e.grid, "in", func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
		eff.Add(ctx, l)
		return nil, nil
	}, WithProcessOptions(lease))
	testwait.For(t, 30*time.Second, "the payment applied by the second consumer", func() bool { return eff.Get("payment-1") == 1 })
	second := eff.FirstToken("payment-1")
	if second <= first.Token {
		t.Fatalf("takeover token %d, want more than the crashed holder's %d", second, first.Token)
	}
	testwait.For(t, 20*time.Second, "the queue empty", func() bool { return e.fake.depth("in") == 0 })
}

// dyingAPI is the SQS client of a process that dies: after die, no call
// reaches SQS.
type dyingAPI struct {
	API
	mu   sync.Mutex
	dead bool
}

var errDead = errors.New("the process is gone")

func (d *dyingAPI) die() { d.mu.Lock(); d.dead = true; d.mu.Unlock() }

func (d *dyingAPI) isDead() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dead
}

func (d *dyingAPI) ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput, o ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error) {
	if d.isDead() {
		return nil, errDead
	}
	return d.API.ChangeMessageVisibility(ctx, in, o...)
}

func (d *dyingAPI) DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, o ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error) {
	if d.isDead() {
		return nil, errDead
	}
	return d.API.DeleteMessageBatch(ctx, in, o...)
}

// Stopping a consumer releases the keys its handlers hold and makes their
// messages visible at once: the next consumer runs each as attempt 1.
func TestShutdownHandsMessagesBack(t *testing.T) {
	e := setup(t)
	const msgs = 5
	for i := range msgs {
		e.send(t, "in", "pay", KeyAttribute, fmt.Sprintf("m-%d", i))
	}
	var running sync.WaitGroup
	running.Add(msgs)
	stop := e.consume(t, e.grid, "in", func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
		running.Done()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	running.Wait()
	if err := stop(); err != nil {
		t.Fatalf("Consume after its context ended: %v, want nil", err)
	}
	attempts := make(chan int, msgs)
	e.consume(t, e.grid, "in", func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
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

// With WithRedrivePolicy a dead letter stays in the queue, visible again at
// once, for the queue's redrive policy to move after maxReceiveCount
// receives (the fake has none, so it keeps coming back, POISONED each time).
func TestRedrivePolicyLeavesDeadLettersToSQS(t *testing.T) {
	e := setup(t)
	reg := prometheus.NewRegistry()
	e.send(t, "in", "poison", KeyAttribute, "bad-1")
	e.consume(t, e.grid, "in", func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
		return nil, client.Poison(errors.New("bad amount"))
	}, WithRedrivePolicy(), WithRegisterer(reg))
	testwait.For(t, 20*time.Second, "the poisoned message received again", func() bool {
		return adaptertest.Counted(t, reg, "sqs", adapter.Poisoned, adapter.DeadLetter) >= 2
	})
	if n := e.fake.depth("in"); n != 1 {
		t.Fatalf("queue holds %d messages, want the dead letter kept for the redrive policy", n)
	}
}
