package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
)

// streamCarrier takes a node's batches as frames of one long-lived Stream
// RPC (grid.proto), the client's default: there is no in-flight window and
// no answer waits for another's. Every call of a frame is tagged with an
// id; the node answers each as soon as its shard has applied it, and one
// receiver goroutine per stream hands the answers to their callers.
//
// The stream is opened with the first batch and again with the first
// batch after it broke. A stream that breaks fails the calls it carried
// and has not answered as a Batch RPC that fails on its way does: they
// may have been applied. A batch that could not open a stream never left.
//
// A frame carries a timeout: the longest any of its callers still waits
// (none when one of them waits without a deadline), after which the node
// gives up on the frame's operations, as it gives up on an RPC at its
// deadline.
//
// A node older than Stream answers it Unimplemented: the carrier then
// sends that batch, which the node never saw, and every later one as
// unary Batch RPCs, one per batch, with no window.
type streamCarrier struct {
	open  func(ctx context.Context) (gridpb.Grid_StreamClient, error)
	unary func(context.Context, *gridpb.BatchRequest) (*gridpb.BatchResponse, error)
	// legacy is set once the node answered Stream Unimplemented.
	legacy atomic.Bool

	wg sync.WaitGroup // receivers and legacy sends

	mu     sync.Mutex
	cur    *flow // the open stream; nil when none
	nextID uint64
}

// flow is one open stream and the calls it carries that await answers.
type flow struct {
	st     gridpb.Grid_StreamClient
	cancel context.CancelFunc
	// pending is guarded by the carrier's mu; nil once the stream broke.
	pending map[uint64]*call
}

func newStreamCarrier(open func(ctx context.Context) (gridpb.Grid_StreamClient, error),
	unary func(context.Context, *gridpb.BatchRequest) (*gridpb.BatchResponse, error)) *streamCarrier {
	return &streamCarrier{open: open, unary: unary}
}

func (s *streamCarrier) turn(root context.Context) bool { return root.Err() == nil }

func (s *streamCarrier) skip() {}

func (s *streamCarrier) wait() { s.wg.Wait() }

func (s *streamCarrier) carry(root context.Context, batch []*call) {
	if s.legacy.Load() {
		s.sendLegacy(root, batch)
		return
	}
	f, err := s.flow(root)
	if err != nil {
		for _, cl := range batch {
			cl.answer(nil, unsent(closedOr(root, err)))
		}
		return
	}
	req := &gridpb.StreamRequest{Ids: make([]uint64, len(batch)), Ops: make([]*gridpb.Op, len(batch)), TimeoutMs: frameTimeout(batch)}
	s.mu.Lock()
	if f.pending == nil {
		// The stream broke since flow returned it: nothing of this batch
		// left. A node that does not know Stream broke it at once (its
		// receiver marked the carrier legacy): the batch goes as a Batch
		// RPC, as the calls the stream held did.
		s.mu.Unlock()
		if s.legacy.Load() && root.Err() == nil {
			s.sendLegacy(root, batch)
			return
		}
		for _, cl := range batch {
			cl.answer(nil, unsent(fmt.Errorf("%w: the stream to the node broke", ErrUnavailable)))
		}
		return
	}
	for i, cl := range batch {
		s.nextID++
		req.Ids[i], req.Ops[i] = s.nextID, cl.op
		f.pending[s.nextID] = cl
	}
	s.mu.Unlock()
	// A failed Send aborts the stream: its receiver then fails every call
	// the stream carries, these included, with the stream's status.
	_ = f.st.Send(req)
}

// flow returns the open stream, opening one if there is none.
func (s *streamCarrier) flow(root context.Context) (*flow, error) {
	s.mu.Lock()
	f := s.cur
	s.mu.Unlock()
	if f != nil {
		return f, nil
	}
	ctx, cancel := context.WithCancel(root)
	st, err := s.open(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	f = &flow{st: st, cancel: cancel, pending: map[uint64]*call{}}
	s.mu.Lock()
	s.cur = f
	s.mu.Unlock()
	s.wg.Add(1)
	go s.receive(root, f)
	return f, nil
}

// receive hands the answers of stream f to their callers until it ends,
// then fails the calls it has not answered.
func (s *streamCarrier) receive(root context.Context, f *flow) {
	defer s.wg.Done()
	for {
		resp, err := f.st.Recv()
		if err == nil && len(resp.GetIds()) != len(resp.GetResults()) {
			err = fmt.Errorf("%w: a stream frame with %d ids for %d results", errProtocol, len(resp.GetIds()), len(resp.GetResults()))
		}
		if err != nil {
			s.broke(root, f, err)
			return
		}
		answered := make([]*call, len(resp.Ids))
		s.mu.Lock()
		for i, id := range resp.Ids {
			answered[i] = f.pending[id]
			delete(f.pending, id)
		}
		s.mu.Unlock()
		for i, cl := range answered {
			if cl != nil { // nil: an id not in flight, answered already
				cl.answer(resp.Results[i], nil)
			}
		}
	}
}

// broke ends stream f after err and fails the calls it has not answered:
// they may have been applied. A node that does not know Stream applied
// none of them; they go again as Batch RPCs, as every batch after them.
func (s *streamCarrier) broke(root context.Context, f *flow, err error) {
	f.cancel()
	s.mu.Lock()
	if s.cur == f {
		s.cur = nil
	}
	left := f.pending
	f.pending = nil
	s.mu.Unlock()
	if status.Code(err) == codes.Unimplemented && root.Err() == nil {
		s.legacy.Store(true)
		batch := make([]*call, 0, len(left))
		for _, cl := range left {
			batch = append(batch, cl)
		}
		s.sendLegacy(root, batch)
		return
	}
	err = closedOr(root, err)
	for _, cl := range left {
		cl.answer(nil, err)
	}
}

// sendLegacy sends batch as one Batch RPC on a goroutine of its own.
func (s *streamCarrier) sendLegacy(root context.Context, batch []*call) {
	if len(batch) == 0 {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sendUnary(root, s.unary, batch)
	}()
}

// frameTimeout is the timeout of a frame carrying batch, in milliseconds:
// the longest its callers still wait, rounded up; 0 (none) when one of
// them has no deadline.
func frameTimeout(batch []*call) uint32 {
	var longest time.Duration
	for _, cl := range batch {
		dl, ok := cl.ctx.Deadline()
		if !ok {
			return 0
		}
		longest = max(longest, time.Until(dl))
	}
	ms := (longest + time.Millisecond - 1) / time.Millisecond
	return uint32(min(max(ms, 1), 1<<31))
}
