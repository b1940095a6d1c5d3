package servicebus_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// fakeQueue is an in-memory Service Bus queue with peek-lock semantics, as
// far as Consume uses them: a received message is locked for lockDuration,
// a lock that lapses makes it available again, every delivery counts and
// past maxDelivery the message is dead-lettered; settling needs the current
// lock; scheduled messages become available at their time.
type fakeQueue struct {
	lockDuration time.Duration
	maxDelivery  uint32

	mu      sync.Mutex
	entries []*fakeEntry
	dead    []*fakeEntry
	done    int // completed
	tokens  uint64
	changed chan struct{} // closed and replaced at every change
}

type fakeEntry struct {
	msg         azservicebus.ReceivedMessage // the message as sent
	availableAt time.Time
	locked      bool
	lockedUntil time.Time
	token       [16]byte
	deliveries  uint32
	deadReason  string
	deadDesc    string
}

var errLockLost = errors.New("fake service bus: the message's lock was lost")

func newFakeQueue(lock time.Duration, maxDelivery uint32) *fakeQueue {
	return &fakeQueue{lockDuration: lock, maxDelivery: maxDelivery, changed: make(chan struct{})}
}

func (q *fakeQueue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// send enqueues msg, as sent: its id, body, properties and correlation id.
func (q *fakeQueue) send(msg azservicebus.ReceivedMessage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entries = append(q.entries, &fakeEntry{msg: msg})
	q.notify()
}

func (q *fakeQueue) ReceiveMessages(ctx context.Context, max int, _ *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	for {
		q.mu.Lock()
		now := time.Now()
		var out []*azservicebus.ReceivedMessage
		next := now.Add(time.Second)
		for i := 0; i < len(q.entries) && len(out) < max; i++ {
			e := q.entries[i]
			if e.locked && now.Before(e.lockedUntil) {
				next = minTime(next, e.lockedUntil)
				continue
			}
			if now.Before(e.availableAt) {
				next = minTime(next, e.availableAt)
				continue
			}
			e.deliveries++
			if e.deliveries > q.maxDelivery {
				e.deadReason = "MaxDeliveryCountExceeded"
				q.dead = append(q.dead, e)
				q.entries = append(q.entries[:i], q.entries[i+1:]...)
				i--
				continue
			}
			q.tokens++
			e.locked, e.lockedUntil = true, now.Add(q.lockDuration)
			e.token = [16]byte{byte(q.tokens), byte(q.tokens >> 8), byte(q.tokens >> 16)}
			m := e.msg
			until := e.lockedUntil
			m.LockToken, m.LockedUntil, m.DeliveryCount = e.token, &until, e.deliveries
			out = append(out, &m)
		}
		changed := q.changed
		q.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		case <-time.After(time.Until(next)): // a lock lapses, a schedule comes due
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// locked finds msg's entry while msg holds its lock; the caller holds mu.
func (q *fakeQueue) locked(msg *azservicebus.ReceivedMessage) (int, error) {
	for i, e := range q.entries {
		if e.locked && e.token == msg.LockToken && time.Now().Before(e.lockedUntil) {
			return i, nil
		}
	}
	return 0, errLockLost
}

func (q *fakeQueue) CompleteMessage(_ context.Context, msg *azservicebus.ReceivedMessage, _ *azservicebus.CompleteMessageOptions) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, err := q.locked(msg)
	if err != nil {
		return err
	}
	q.entries = append(q.entries[:i], q.entries[i+1:]...)
	q.done++
	q.notify()
	return nil
}

func (q *fakeQueue) AbandonMessage(_ context.Context, msg *azservicebus.ReceivedMessage, _ *azservicebus.AbandonMessageOptions) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, err := q.locked(msg)
	if err != nil {
		return err
	}
	q.entries[i].locked = false
	q.notify()
	return nil
}

func (q *fakeQueue) DeadLetterMessage(_ context.Context, msg *azservicebus.ReceivedMessage, o *azservicebus.DeadLetterOptions) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, err := q.locked(msg)
	if err != nil {
		return err
	}
	e := q.entries[i]
	if o != nil && o.Reason != nil {
		e.deadReason = *o.Reason
	}
	if o != nil && o.ErrorDescription != nil {
		e.deadDesc = *o.ErrorDescription
	}
	q.dead = append(q.dead, e)
	q.entries = append(q.entries[:i], q.entries[i+1:]...)
	q.notify()
	return nil
}

func (q *fakeQueue) RenewMessageLock(_ context.Context, msg *azservicebus.ReceivedMessage, _ *azservicebus.RenewMessageLockOptions) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, err := q.locked(msg)
	if err != nil {
		return err
	}
	e := q.entries[i]
	e.lockedUntil = time.Now().Add(q.lockDuration)
	until := e.lockedUntil
	msg.LockedUntil = &until
	return nil
}

func (q *fakeQueue) ScheduleMessages(_ context.Context, msgs []*azservicebus.Message, at time.Time, _ *azservicebus.ScheduleMessagesOptions) ([]int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	seqs := make([]int64, len(msgs))
	for i, m := range msgs {
		rm := azservicebus.ReceivedMessage{Body: m.Body, ApplicationProperties: m.ApplicationProperties, CorrelationID: m.CorrelationID}
		if m.MessageID != nil {
			rm.MessageID = *m.MessageID
		}
		q.entries = append(q.entries, &fakeEntry{msg: rm, availableAt: at})
		seqs[i] = int64(len(q.entries))
	}
	q.notify()
	return seqs, nil
}

// state is the queue's counts: messages waiting or locked, completed, and
// dead-lettered.
func (q *fakeQueue) state() (waiting, done, dead int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.entries), q.done, len(q.dead)
}

// deadLetter is a message dead-lettered, and why.
type deadLetter struct{ body, reason string }

// deadLetters returns the dead-lettered messages, each with its reason
// and description as "<reason>: <description>".
func (q *fakeQueue) deadLetters() []deadLetter {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []deadLetter
	for _, e := range q.dead {
		out = append(out, deadLetter{string(e.msg.Body), e.deadReason + ": " + e.deadDesc})
	}
	return out
}
