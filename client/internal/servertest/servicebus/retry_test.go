package servicebus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	"github.com/l4xg/grid/client/servicebus"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/prometheus/client_golang/prometheus"
)

// run is one run of a handler: what it was handed.
type run struct {
	id, key          string
	attempt          int
	delivery         uint32
	subject, session string
	retryOf          any
}

// runs records a handler's runs; fail says whether a run fails (with
// client.RetryAfter of the delay it returns) or succeeds.
type runs struct {
	mu   sync.Mutex
	all  []run
	fail func(body string, n int) (time.Duration, bool) // n: runs of the key before this one
}

func (rs *runs) handler(ctx context.Context, msg *azservicebus.ReceivedMessage, l client.Lease) ([]byte, error) {
	rs.mu.Lock()
	n := 0
	for _, r := range rs.all {
		if r.key == l.Key {
			n++
		}
	}
	r := run{id: msg.MessageID, key: l.Key, attempt: l.Attempt, delivery: msg.DeliveryCount, retryOf: msg.ApplicationProperties[servicebus.RetryOfProperty]}
	if msg.Subject != nil {
		r.subject = *msg.Subject
	}
	if msg.SessionID != nil {
		r.session = *msg.SessionID
	}
	rs.all = append(rs.all, r)
	rs.mu.Unlock()
	if d, fail := rs.fail(string(msg.Body), n); fail {
		return nil, client.RetryAfter(errors.New("transient"), d)
	}
	return nil, nil
}

func (rs *runs) snapshot() []run {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]run(nil), rs.all...)
}

func (rs *runs) String() string { return fmt.Sprintf("runs %+v", rs.snapshot()) }

// entry is the fake queue's entry of the message with id (a copy of it).
func (q *fakeQueue) entry(id string) (fakeEntry, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range q.entries {
		if e.msg.MessageID == id {
			return *e, true
		}
	}
	return fakeEntry{}, false
}

// TestRetryKeptInPlace: without a scheduler, a transient failure keeps
// the message, locked, and runs it again after the grid's retry-after on
// the same delivery. Before, it was abandoned at once, delivered again,
// answered BUSY (the key FAILED until its retry-after) and abandoned again
// until the queue's MaxDeliveryCount (2 here) dead-lettered it.
func TestRetryKeptInPlace(t *testing.T) {
	grid, _ := adaptertest.Grid(t)
	q := newFakeQueue(2*time.Second, 2)
	rs := &runs{fail: func(_ string, n int) (time.Duration, bool) { return 300 * time.Millisecond, n == 0 }}
	q.send(azservicebus.ReceivedMessage{MessageID: "pay-1", Body: []byte("pay-1")})
	adaptertest.Start(t, func(ctx context.Context) error { return servicebus.Consume(ctx, q, grid, "sb", rs.handler) })

	testwait.For(t, 10*time.Second, "the message completed or dead-lettered", func() bool {
		_, done, dead := q.state()
		return done+dead > 0
	}, rs.String)
	if _, done, dead := q.state(); done != 1 || dead != 0 {
		t.Fatalf("completed %d, dead-lettered %d (%v), want 1 and 0; %v", done, dead, q.deadLetters(), rs)
	}
	got := rs.snapshot()
	if len(got) != 2 || got[0].delivery != 1 || got[1].delivery != 1 || got[0].attempt != 1 || got[1].attempt != 2 {
		t.Fatalf("%v, want two runs on delivery 1, attempts 1 and 2", rs)
	}
}

// TestKeptMessageStop: a kept message holds its slot only, other messages
// are received and run meanwhile, and stopping the consumer abandons the
// kept message at once (its retry-after is 20 s), without spending a
// delivery on it before. Before, the retry abandoned it at once
// (failed/requeue, never failed/retry).
func TestKeptMessageStop(t *testing.T) {
	grid, _ := adaptertest.Grid(t)
	q := newFakeQueue(2*time.Second, 100)
	rs := &runs{fail: func(body string, _ int) (time.Duration, bool) { return 20 * time.Second, body == "a" }}
	reg := prometheus.NewRegistry()
	q.send(azservicebus.ReceivedMessage{MessageID: "a", Body: []byte("a")})
	stop := adaptertest.Start(t, func(ctx context.Context) error {
		return servicebus.Consume(ctx, q, grid, "sb", rs.handler, servicebus.WithBatch(2), servicebus.WithRegisterer(reg))
	})
	testwait.For(t, 5*time.Second, "a kept for a retry", func() bool {
		return adaptertest.Counted(t, reg, "servicebus", adapter.Failed, adapter.Retry) >= 1
	}, rs.String)
	if e, ok := q.entry("a"); !ok || !e.locked || e.deliveries != 1 {
		t.Fatalf("a: %+v (found %v), want locked on delivery 1", e, ok)
	}
	q.send(azservicebus.ReceivedMessage{MessageID: "b", Body: []byte("b")})
	testwait.For(t, 5*time.Second, "b completed while a is kept", func() bool { _, done, _ := q.state(); return done == 1 }, rs.String)

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	testwait.For(t, 5*time.Second, "Consume returned", func() bool { return len(stopped) == 1 })
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if e, ok := q.entry("a"); !ok || e.locked || e.deliveries != 1 {
		t.Fatalf("a after the stop: %+v (found %v), want abandoned after 1 delivery", e, ok)
	}
	if n := len(rs.snapshot()); n != 2 {
		t.Fatalf("%v, want a and b run once each", rs)
	}
}

// dedupScheduler schedules on a fakeQueue what a sender would: every
// property a sender sets, and with the queue's duplicate detection: a
// message whose MessageID was sent before is dropped.
type dedupScheduler struct {
	q    *fakeQueue
	mu   sync.Mutex
	seen map[string]bool
	sent []*azservicebus.Message // scheduled, dropped included
}

func (d *dedupScheduler) send(msg azservicebus.ReceivedMessage) {
	d.mu.Lock()
	d.seen[msg.MessageID] = true
	d.mu.Unlock()
	d.q.send(msg)
}

func (d *dedupScheduler) ScheduleMessages(_ context.Context, msgs []*azservicebus.Message, at time.Time, _ *azservicebus.ScheduleMessagesOptions) ([]int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range msgs {
		d.sent = append(d.sent, m)
		rm := azservicebus.ReceivedMessage{Body: m.Body, ApplicationProperties: m.ApplicationProperties, ContentType: m.ContentType,
			CorrelationID: m.CorrelationID, PartitionKey: m.PartitionKey, ReplyTo: m.ReplyTo, ReplyToSessionID: m.ReplyToSessionID,
			SessionID: m.SessionID, Subject: m.Subject, TimeToLive: m.TimeToLive, To: m.To}
		if m.MessageID != nil {
			rm.MessageID = *m.MessageID
		}
		if d.seen[rm.MessageID] {
			continue // a duplicate within the detection window
		}
		d.seen[rm.MessageID] = true
		d.q.mu.Lock()
		d.q.entries = append(d.q.entries, &fakeEntry{msg: rm, availableAt: at})
		d.q.notify()
		d.q.mu.Unlock()
	}
	return make([]int64, len(msgs)), nil
}

func (d *dedupScheduler) scheduled() []*azservicebus.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*azservicebus.Message(nil), d.sent...)
}

// TestScheduledRetryCopy: with a scheduler, a retry's copy gets a MessageID
// of its own, so the queue's duplicate detection does not drop it, keeps
// Subject and SessionID, and the grid sees it under the original's key
// (the default rule: the MessageID), its attempts counting on. Before, the
// copy had the original's MessageID and was dropped: the message ran once
// and was lost.
func TestScheduledRetryCopy(t *testing.T) {
	grid, _ := adaptertest.Grid(t)
	q := newFakeQueue(5*time.Second, 10)
	s := &dedupScheduler{q: q, seen: map[string]bool{}}
	rs := &runs{fail: func(_ string, n int) (time.Duration, bool) { return 100 * time.Millisecond, n < 2 }}
	subject, session := "orders", "customer-7"
	s.send(azservicebus.ReceivedMessage{MessageID: "order-1", Body: []byte("order-1"), Subject: &subject, SessionID: &session,
		ApplicationProperties: map[string]any{"tenant": "t1"}})
	adaptertest.Start(t, func(ctx context.Context) error {
		return servicebus.Consume(ctx, q, grid, "sb", rs.handler, servicebus.WithRetryScheduler(s))
	})

	testwait.For(t, 10*time.Second, "three runs and nothing left in the queue", func() bool {
		waiting, _, _ := q.state()
		return len(rs.snapshot()) == 3 && waiting == 0
	}, func() string { return fmt.Sprintf("%v; scheduled %d", rs, len(s.scheduled())) })
	got := rs.snapshot()
	for i, r := range got {
		if r.key != "order-1" || r.attempt != i+1 || r.subject != subject || r.session != session {
			t.Errorf("run %d: %+v, want key order-1, attempt %d, subject %s, session %s", i, r, i+1, subject, session)
		}
	}
	sched := s.scheduled()
	if len(sched) != 2 {
		t.Fatalf("scheduled %d copies, want 2", len(sched))
	}
	for i, m := range sched {
		if m.MessageID == nil || *m.MessageID == "order-1" || (i > 0 && *m.MessageID == *sched[0].MessageID) {
			t.Errorf("copy %d has MessageID %v: duplicate detection drops it", i, m.MessageID)
		}
		if m.ApplicationProperties["tenant"] != "t1" {
			t.Errorf("copy %d lost its properties: %v", i, m.ApplicationProperties)
		}
	}
	if _, done, dead := q.state(); done != 3 || dead != 0 {
		t.Fatalf("completed %d, dead-lettered %d, want 3 and 0", done, dead)
	}
}
