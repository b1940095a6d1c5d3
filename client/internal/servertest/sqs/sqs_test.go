package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	"github.com/l4xg/grid/client/sqs"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
)

// These tests run the AWS SDK's own client against fakeSQS, an endpoint of
// SQS's JSON protocol in this package (goaws speaks only the old XML
// protocol, and no other fake runs here), and a real grid node.

// harness runs the conformance suite on a fakeSQS of its own per scenario
// (queues "in" and "dlq"), the visibility timeout the suite's redelivery
// period.
var harness = adaptertest.Harness{
	Name:       "sqs",
	Open:       func(t *testing.T, visibility time.Duration) adaptertest.Broker { return setup(t, visibility) },
	Redelivers: true,
}

func TestConformance(t *testing.T) { adaptertest.Run(t, harness) }

type env struct {
	fake       *fakeSQS
	api        *awssqs.Client
	visibility time.Duration
}

func setup(t *testing.T, visibility time.Duration) *env {
	t.Helper()
	f := newFakeSQS(t)
	api := awssqs.New(awssqs.Options{
		BaseEndpoint: aws.String(f.srv.URL), Region: "us-east-1", Credentials: aws.AnonymousCredentials{},
	})
	return &env{fake: f, api: api, visibility: visibility}
}

// send sends a message through the SDK with string attributes (name,
// value pairs; those with an empty value are left out).
func (e *env) send(t *testing.T, queue, body string, attrs ...string) {
	t.Helper()
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(e.fake.url(queue)), MessageBody: aws.String(body),
		MessageAttributes: map[string]types.MessageAttributeValue{}}
	for i := 0; i+1 < len(attrs); i += 2 {
		if attrs[i+1] != "" {
			in.MessageAttributes[attrs[i]] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(attrs[i+1])}
		}
	}
	if _, err := e.api.SendMessage(context.Background(), in); err != nil {
		t.Fatal(err)
	}
}

func (e *env) consume(t *testing.T, c *client.Client, queue string, h sqs.Handler, opts ...sqs.Option) (stop func() error) {
	t.Helper()
	opts = append([]sqs.Option{sqs.WithWait(time.Second)}, opts...)
	return adaptertest.Start(t, func(ctx context.Context) error {
		return sqs.Consume(ctx, e.api, e.fake.url(queue), c, "test", h, opts...)
	})
}

// Publish sends m to "in" with its key, correlation id and version as
// attributes.
func (e *env) Publish(t *testing.T, m adaptertest.Message) {
	t.Helper()
	version := ""
	if m.Version != 0 {
		version = fmt.Sprint(m.Version)
	}
	e.send(t, "in", m.Body, sqs.KeyAttribute, m.Key, "correlation-id", m.Correlation, "version", version)
}

// Consumer is Consume on a client of its own, which cut kills. A message
// without an idempotency-key attribute (SQS gives every message an id) is
// dead-lettered.
func (e *env) Consumer(t *testing.T, cfg adaptertest.Config) (func(context.Context) error, func()) {
	t.Helper()
	api := &dyingAPI{API: e.api}
	opts := []sqs.Option{sqs.WithWait(time.Second), sqs.WithVisibility(e.visibility), sqs.WithDeadLetterQueue(e.fake.url("dlq")),
		sqs.WithKey(func(msg types.Message) (string, error) {
			if k := attribute(msg, sqs.KeyAttribute); k != "" {
				return k, nil
			}
			return "", errors.New("no idempotency-key attribute")
		}),
		sqs.WithFingerprint(func(msg types.Message) uint64 { return adaptertest.Fingerprint([]byte(aws.ToString(msg.Body))) }),
		sqs.WithEntity(func(msg types.Message) (string, uint64, bool) {
			var v uint64
			_, err := fmt.Sscan(attribute(msg, "version"), &v)
			return adaptertest.Entity, v, err == nil
		})}
	if cfg.Lease > 0 {
		opts = append(opts, sqs.WithProcessOptions(client.WithLease(cfg.Lease)))
	}
	if cfg.InFlight > 0 {
		opts = append(opts, sqs.WithBatch(min(cfg.InFlight, 10)))
	}
	opts = append(opts, sqs.WithStopGrace(cfg.StopGrace))
	if cfg.Registerer != nil {
		opts = append(opts, sqs.WithRegisterer(cfg.Registerer))
	}
	h := func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
		return nil, cfg.Handler(ctx, aws.ToString(msg.Body), l)
	}
	return func(ctx context.Context) error {
		return sqs.Consume(ctx, api, e.fake.url("in"), cfg.Grid, adaptertest.Namespace, h, opts...)
	}, api.die
}

// Pending is how many messages "in" holds, visible or not.
func (e *env) Pending(t *testing.T) int { return e.fake.depth("in") }

// DeadLetters are the messages of "dlq".
func (e *env) DeadLetters(t *testing.T) []adaptertest.DeadLetter {
	var out []adaptertest.DeadLetter
	for _, m := range e.fake.messages("dlq") {
		out = append(out, adaptertest.DeadLetter{Body: m.Body, Reason: m.Attrs[sqs.ReasonAttribute].StringValue})
	}
	return out
}

// dyingAPI is the SQS client of a process that dies: after die, no call
// reaches SQS.
type dyingAPI struct {
	sqs.API
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

func (d *dyingAPI) ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, o ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	if d.isDead() {
		return nil, errDead
	}
	return d.API.ReceiveMessage(ctx, in, o...)
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

func (d *dyingAPI) SendMessage(ctx context.Context, in *awssqs.SendMessageInput, o ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	if d.isDead() {
		return nil, errDead
	}
	return d.API.SendMessage(ctx, in, o...)
}

// With WithRedrivePolicy a dead letter stays in the queue, visible again at
// once, for the queue's redrive policy to move after maxReceiveCount
// receives (the fake has none, so it keeps coming back, POISONED each time).
func TestRedrivePolicyLeavesDeadLettersToSQS(t *testing.T) {
	e := setup(t, 30*time.Second)
	grid, _ := adaptertest.Grid(t)
	reg := prometheus.NewRegistry()
	e.send(t, "in", "poison", sqs.KeyAttribute, "bad-1")
	e.consume(t, grid, "in", func(ctx context.Context, msg types.Message, l client.Lease) ([]byte, error) {
		return nil, client.Poison(errors.New("bad amount"))
	}, sqs.WithRedrivePolicy(), sqs.WithRegisterer(reg))
	testwait.For(t, 20*time.Second, "the poisoned message received again", func() bool {
		return adaptertest.Counted(t, reg, "sqs", adapter.Poisoned, adapter.DeadLetter) >= 2
	})
	if n := e.fake.depth("in"); n != 1 {
		t.Fatalf("queue holds %d messages, want the dead letter kept for the redrive policy", n)
	}
}

// attribute returns the string value of msg's attribute name, or "".
func attribute(msg types.Message, name string) string {
	if a, ok := msg.MessageAttributes[name]; ok {
		return aws.ToString(a.StringValue)
	}
	return ""
}
