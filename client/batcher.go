package client

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/l4xg/grid/api/gridpb"
)

// batcher coalesces concurrent single-operation calls into batches, which
// its carrier takes to the node: Batch RPCs (unaryCarrier) or frames of
// one long-lived stream (streamCarrier).
//
// There is no linger delay. Calls queue up; one dispatcher goroutine waits
// for the carrier's turn (a free slot of the unary in-flight window; at
// once on a stream), then hands it everything queued at that moment (up
// to maxOps operations and maxBytes bytes) as one batch. A lone call
// therefore leaves at once, while under load the queue fills during the
// round trips (or the stream writes) in flight and the batches grow by
// themselves.
//
// Woken, the dispatcher first yields its processor once (runtime.Gosched).
// The first caller's submit wakes it, and Go runs a goroutine woken that
// way next on the caller's processor, ahead of the other callers that the
// same answer frame woke: without the yield, a stream frame carried one
// call under load (1.07 operations a frame with 50 callers on one node),
// with it 4.5 to 6.5, and the node and the client spend about a fifth less
// CPU per call (bench/README.md). Alone, a call waits for nothing: a yield
// with no other goroutine ready returns at once.
//
// A caller waits for its own answer or for its context. A call whose context
// ended while queued is dropped before sending; once sent it cannot be
// recalled, so its outcome is unknown to the caller; one still queued is
// reported as never sent.
type batcher struct {
	c        carrier
	maxOps   int
	maxBytes int
	wake     chan struct{} // capacity 1: "the queue is not empty"

	root context.Context // cancelled by close
	stop context.CancelFunc
	wg   sync.WaitGroup // the dispatcher

	mu     sync.Mutex
	queue  []*call
	closed bool

	batches atomic.Int64 // batches handed to the carrier, for tests
	stats   *callStats   // the Client's
}

// A carrier takes the batches of one node's batcher to the node and
// answers every call of each: once, with its result or an error, then
// closes its done channel. Only the dispatcher calls turn, skip and carry.
type carrier interface {
	// turn waits until a batch may leave now; false when root ended.
	turn(root context.Context) bool
	// skip gives back a turn for which no batch came.
	skip()
	// carry sends batch, without waiting for its answers. root ends the
	// sends in flight when the batcher closes.
	carry(root context.Context, batch []*call)
	// wait waits for the carrier's goroutines, once root has ended.
	wait()
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
	// taken is set, under the batcher's lock, when a batch took the call;
	// one whose context ends before that is never sent.
	taken bool
	// queued and took are when the call was queued and when a batch took
	// it, for Stats; stats is nil for a call no batcher queued.
	queued, took time.Time
	stats        *callStats
}

// answer gives cl its result, or the error of the operation the result
// carries, or err when err is not nil, and wakes its caller.
func (cl *call) answer(res *gridpb.OpResult, err error) {
	switch {
	case err != nil:
		cl.err = err
	case res.GetError() != nil:
		cl.err = fromOpError(res.GetError())
	default:
		cl.res = res
	}
	if cl.stats != nil && !cl.took.IsZero() {
		cl.stats.answered(cl.queued, cl.took)
	}
	close(cl.done)
}

func newBatcher(c carrier, maxOps int, stats *callStats) *batcher {
	root, stop := context.WithCancel(context.Background())
	b := &batcher{
		c:        c,
		stats:    stats,
		maxOps:   maxOps,
		maxBytes: maxBatchBytes,
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
	cl := &call{ctx: ctx, op: op, size: op.SizeVT(), done: make(chan struct{}), queued: time.Now(), stats: b.stats}
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
		runtime.Gosched() // let the callers woken with this one queue theirs
		for {
			if !b.c.turn(b.root) {
				return
			}
			batch := b.take()
			if len(batch) == 0 {
				b.c.skip()
				break
			}
			b.batches.Add(1)
			b.stats.batch()
			b.c.carry(b.root, batch)
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
	now := time.Now()
	for _, cl := range b.queue {
		if len(batch) == b.maxOps || (len(batch) > 0 && bytes+cl.size > b.maxBytes) {
			break
		}
		n++
		if cl.ctx.Err() != nil {
			continue
		}
		cl.taken, cl.took = true, now
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

// unaryCarrier sends each batch as one Batch RPC, at most len(slots) at
// once. A Batch RPC is cancelled only when every caller in it has gone, or
// when the batcher is closed.
type unaryCarrier struct {
	rpc   func(context.Context, *gridpb.BatchRequest) (*gridpb.BatchResponse, error)
	slots chan struct{} // the in-flight window: a send holds one element
	wg    sync.WaitGroup
}

func newUnaryCarrier(rpc func(context.Context, *gridpb.BatchRequest) (*gridpb.BatchResponse, error), inFlight int) *unaryCarrier {
	return &unaryCarrier{rpc: rpc, slots: make(chan struct{}, inFlight)}
}

func (u *unaryCarrier) turn(root context.Context) bool {
	select {
	case u.slots <- struct{}{}:
		return true
	case <-root.Done():
		return false
	}
}

func (u *unaryCarrier) skip() { <-u.slots }

func (u *unaryCarrier) carry(root context.Context, batch []*call) {
	u.wg.Add(1)
	go func() {
		defer func() {
			<-u.slots
			u.wg.Done()
		}()
		sendUnary(root, u.rpc, batch)
	}()
}

func (u *unaryCarrier) wait() { u.wg.Wait() }

// sendUnary runs one Batch RPC and hands each caller its answer.
func sendUnary(root context.Context, rpc func(context.Context, *gridpb.BatchRequest) (*gridpb.BatchResponse, error), batch []*call) {
	ctx, cancel := abandonable(root, batch)
	defer cancel()
	req := &gridpb.BatchRequest{Ops: make([]*gridpb.Op, len(batch))}
	for i, cl := range batch {
		req.Ops[i] = cl.op
	}
	resp, err := rpc(ctx, req)
	if err == nil && len(resp.GetResults()) != len(batch) {
		err = fmt.Errorf("%w: %d results for %d operations", errProtocol, len(resp.GetResults()), len(batch))
	} else if err != nil {
		err = closedOr(root, err)
	}
	for i, cl := range batch {
		if err != nil {
			cl.answer(nil, err)
		} else {
			cl.answer(resp.Results[i], nil)
		}
	}
}

// closedOr maps the error of a send under root: ErrClosed once the batcher
// closed, else as fromRPC does.
func closedOr(root context.Context, err error) error {
	err = fromRPC(root, err)
	if root.Err() != nil {
		return ErrClosed
	}
	return err
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
		cl.answer(nil, ErrClosed)
	}
	b.stop()
	b.wg.Wait()
	b.c.wait()
}
