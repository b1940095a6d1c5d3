package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/protobuf/proto"
)

// batcher coalesces concurrent single-operation calls into Batch RPCs.
//
// There is no linger delay. Calls queue up; one dispatcher goroutine takes a
// slot of the in-flight window, then sends everything queued at that moment
// (up to maxOps operations and maxBytes bytes) as one Batch RPC. A lone call
// therefore leaves at once, while under load the queue fills during the
// round trips of the batches in flight and the batches grow by themselves.
//
// A caller waits for its own answer or for its context. A call whose context
// ended while queued is dropped before sending; once sent it cannot be
// recalled, so its outcome is unknown to the caller; one still queued is
// reported as never sent. A Batch RPC is cancelled
// only when every caller in it has gone, or when the batcher is closed.
type batcher struct {
	rpc      func(context.Context, *gridpb.BatchRequest) (*gridpb.BatchResponse, error)
	maxOps   int
	maxBytes int
	slots    chan struct{} // the in-flight window: a send holds one element
	wake     chan struct{} // capacity 1: "the queue is not empty"

	root context.Context // cancelled by close
	stop context.CancelFunc
	wg   sync.WaitGroup // dispatcher and senders

	mu     sync.Mutex
	queue  []*call
	closed bool

	batches atomic.Int64 // Batch RPCs sent, for tests and metrics
}

// call is one operation waiting for its answer. res and err are written once,
// before done is closed.
type call struct {
	ctx  context.Context
	op   *gridpb.Op
	size int
	done chan struct{}
	res  *gridpb.OpResult
	err  error
	// taken is set, under the batcher's lock, when a Batch RPC took the
	// call; one whose context ends before that is never sent.
	taken bool
}

func newBatcher(rpc func(context.Context, *gridpb.BatchRequest) (*gridpb.BatchResponse, error), maxOps, inFlight int) *batcher {
	root, stop := context.WithCancel(context.Background())
	b := &batcher{
		rpc:      rpc,
		maxOps:   maxOps,
		maxBytes: maxBatchBytes,
		slots:    make(chan struct{}, inFlight),
		wake:     make(chan struct{}, 1),
		root:     root,
		stop:     stop,
	}
	b.wg.Add(1)
	go b.dispatch()
	return b
}

// submit queues op and waits for its result, or for ctx. The error is a
// per-operation error of the batch or the error of the whole RPC.
func (b *batcher) submit(ctx context.Context, op *gridpb.Op) (*gridpb.OpResult, error) {
	cl := &call{ctx: ctx, op: op, size: proto.Size(op), done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	b.queue = append(b.queue, cl)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	select {
	case <-cl.done:
		return cl.res, cl.err
	case <-ctx.Done():
		select {
		case <-cl.done: // the answer came too
			return cl.res, cl.err
		default:
		}
		b.mu.Lock()
		taken := cl.taken
		b.mu.Unlock()
		if !taken {
			// take skips a call whose context has ended: it never leaves.
			return nil, unsent(ctxDone(ctx))
		}
		return nil, ctxErr(ctx)
	}
}

// dispatch is the single goroutine that forms batches.
func (b *batcher) dispatch() {
	defer b.wg.Done()
	for {
		select {
		case <-b.wake:
		case <-b.root.Done():
			return
		}
		for {
			select {
			case b.slots <- struct{}{}:
			case <-b.root.Done():
				return
			}
			batch := b.take()
			if len(batch) == 0 {
				<-b.slots
				break
			}
			b.wg.Add(1)
			go b.send(batch)
		}
	}
}

// take removes the next batch from the queue, dropping calls whose caller
// has already gone.
func (b *batcher) take() []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch []*call
	bytes := 0
	n := 0
	for _, cl := range b.queue {
		if len(batch) == b.maxOps || (len(batch) > 0 && bytes+cl.size > b.maxBytes) {
			break
		}
		n++
		if cl.ctx.Err() != nil {
			continue
		}
		cl.taken = true
		batch = append(batch, cl)
		bytes += cl.size
	}
	clear(b.queue[:n])
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil
	}
	return batch
}

// send runs one Batch RPC and hands each caller its answer.
func (b *batcher) send(batch []*call) {
	defer func() {
		<-b.slots
		b.wg.Done()
	}()
	ctx, cancel := abandonable(b.root, batch)
	defer cancel()
	req := &gridpb.BatchRequest{Ops: make([]*gridpb.Op, len(batch))}
	for i, cl := range batch {
		req.Ops[i] = cl.op
	}
	b.batches.Add(1)
	resp, err := b.rpc(ctx, req)
	if err == nil && len(resp.GetResults()) != len(batch) {
		err = fmt.Errorf("%w: %d results for %d operations", errProtocol, len(resp.GetResults()), len(batch))
	} else if err != nil {
		err = fromRPC(b.root, err)
		if b.root.Err() != nil {
			err = ErrClosed
		}
	}
	for i, cl := range batch {
		if err != nil {
			cl.err = err
		} else {
			cl.res = resp.Results[i]
			if e := cl.res.GetError(); e != nil {
				cl.res, cl.err = nil, fromOpError(e)
			}
		}
		close(cl.done)
	}
}

// abandonable derives the context of one Batch RPC from parent: it is
// cancelled when every caller of the batch has gone, so that a batch nobody
// waits for frees its slot. A caller without a Done channel keeps it alive.
func abandonable(parent context.Context, batch []*call) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	for _, cl := range batch {
		if cl.ctx.Done() == nil {
			return ctx, cancel
		}
	}
	var live atomic.Int64
	live.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, cl := range batch {
		stops[i] = context.AfterFunc(cl.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// close fails queued calls with ErrClosed, cancels the batches in flight
// (their callers get ErrClosed) and waits for the goroutines to end.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	queued := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, cl := range queued {
		cl.err = ErrClosed
		close(cl.done)
	}
	b.stop()
	b.wg.Wait()
}
