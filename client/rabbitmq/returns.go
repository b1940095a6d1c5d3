package rabbitmq

import (
	"strconv"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// publishIDHeader names each copy the adapter publishes, so that a
// basic.return can be matched to the publish it answers.
const publishIDHeader = "x-grid-publish-id"

// returns matches the broker's basic.returns to the copies published on
// one channel, mandatory, with publisher confirms.
//
// RabbitMQ sends the basic.return of an unroutable mandatory message before
// its basic.ack, and amqp091-go's reader hands the return to the
// NotifyReturn channel before it resolves the publish's confirmation. So
// once a publisher has its confirmation, the return (if any) is either
// recorded by the loop or waiting in the channel's buffer: returned drains
// the buffer before it answers. One goroutine owns the record, and the
// publishers ask it through a channel.
type returns struct {
	in      <-chan amqp.Return
	asks    chan ask
	done    chan struct{}
	stopped chan struct{}
	seq     atomic.Uint64
}

type ask struct {
	id    string
	reply chan *amqp.Return
}

// newReturns starts matching the returns that in (a NotifyReturn channel)
// delivers, until stop is called.
func newReturns(in <-chan amqp.Return) *returns {
	t := &returns{in: in, asks: make(chan ask), done: make(chan struct{}), stopped: make(chan struct{})}
	go t.run()
	return t
}

// next is a new publish id.
func (t *returns) next() string { return strconv.FormatUint(t.seq.Add(1), 10) }

// returned is the return of the copy published with id, nil if none came
// before its confirmation, and forgets it. Ask once per publish, after its
// confirmation (or after giving up on it).
func (t *returns) returned(id string) *amqp.Return {
	a := ask{id, make(chan *amqp.Return, 1)}
	select {
	case t.asks <- a:
		return <-a.reply
	case <-t.stopped:
		return nil
	}
}

// stop ends the loop. Call it once no publisher asks any more.
func (t *returns) stop() {
	close(t.done)
	<-t.stopped
}

func (t *returns) run() {
	defer close(t.stopped)
	got := map[string]amqp.Return{}
	in := t.in
	record := func(r amqp.Return, ok bool) {
		if !ok {
			in = nil // the channel closed: no more returns
			return
		}
		// A copy's id is the adapter's; a return of anything else (a
		// message from before, with no such header) is nobody's.
		if id, isString := r.Headers[publishIDHeader].(string); isString {
			got[id] = r
		}
	}
	for {
		select {
		case r, ok := <-in:
			record(r, ok)
		case a := <-t.asks:
		drain:
			for in != nil {
				select {
				case r, ok := <-in:
					record(r, ok)
				default:
					break drain
				}
			}
			if r, ok := got[a.id]; ok {
				delete(got, a.id)
				a.reply <- &r
			} else {
				a.reply <- nil
			}
		case <-t.done:
			return
		}
	}
}
