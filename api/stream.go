package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
)

// maxStreamFrames bounds the request frames of one stream served at once.
// The node reads no further frame until one of them is answered, so that
// gRPC's flow control holds back a client that sends faster than the
// shards apply.
const maxStreamFrames = 64

// answer is the answers to some operations of a stream: results[i] answers
// the operation tagged ids[i]; sizes[i] is results[i]'s encoded size.
type answer struct {
	ids     []uint64
	results []*gridpb.OpResult
	sizes   []int
	ready   time.Time // when it was handed to the writer
}

// Stream serves the operations of one client stream (grid.proto). Each
// request frame is split by shard, as a Batch is (router.plan), and each
// shard's operations run as a batch of their own (runBatch), all at once:
// a shard's answers leave as soon as that shard has applied them, without
// waiting for the frame's other shards. One writer sends the answers,
// those ready together in one frame (writeAnswers). The stream's headers
// (grid-redirect) hold for every frame; the cluster map is read anew for
// each frame.
//
// The stream ends when the client closes its side, once every frame read
// is answered, or when it is cancelled; answers not yet sent then are
// lost, and the client counts their operations' outcome unknown.
func (s *Server) Stream(st gridpb.Grid_StreamServer) error {
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	out := make(chan answer, maxStreamFrames)
	wrote := make(chan error, 1)
	go func() { wrote <- s.writeAnswers(st, out, cancel) }()
	err := s.serveFrames(ctx, st, out)
	close(out)
	if werr := <-wrote; err == nil {
		err = werr
	}
	return err
}

// errStreamClosing ends the streams of a node that shuts down. Every frame
// the node read before it is answered; the client fails the operations it
// sent after them as the RPCs of a closing node, though none of them was
// applied, and sends them again.
var errStreamClosing = status.Error(codes.Unavailable, "api: node shutting down: stream closed after answering the frames it read")

// serveFrames reads request frames until the client closes its side, or
// the node shuts down, and serves them on up to maxStreamFrames workers of
// the stream: a frame goes to an idle worker, or to a new one while there
// are fewer than maxStreamFrames, or waits for one to be free. Workers
// live as long as the stream, so a frame costs no goroutine start and no
// stack growth. It returns once every frame it read has put its answers in
// out.
func (s *Server) serveFrames(ctx context.Context, st gridpb.Grid_StreamServer, out chan<- answer) error {
	frames := make(chan *gridpb.StreamRequest)
	ended := make(chan error, 1)
	// Recv blocks until the client sends or the stream ends; it ends when
	// Stream returns, which ends this reader.
	go func() {
		for {
			req, err := st.Recv()
			if err != nil {
				ended <- err
				return
			}
			select {
			case frames <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	work := make(chan *gridpb.StreamRequest) // taken by idle workers only
	workers := 0
	var wg sync.WaitGroup
	defer func() {
		close(work)
		wg.Wait()
	}()
	worker := func(req *gridpb.StreamRequest) {
		defer wg.Done()
		for ; req != nil; req = <-work {
			s.serveFrame(ctx, req, out)
		}
	}
	for {
		var req *gridpb.StreamRequest
		select {
		case req = <-frames:
		case err := <-ended:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-s.closing:
			return errStreamClosing
		}
		if len(req.GetIds()) != len(req.GetOps()) {
			return status.Errorf(codes.InvalidArgument, "api: stream frame with %d ids for %d operations", len(req.GetIds()), len(req.GetOps()))
		}
		select {
		case work <- req:
			continue
		default:
		}
		if workers < maxStreamFrames {
			workers++
			wg.Add(1)
			go worker(req)
			continue
		}
		select {
		case work <- req:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// serveFrame answers the operations of one request frame into out: the
// invalid ones at once, then each shard's operations as soon as they are
// done. The stale reads of the frame run as one more part. ctx is the
// stream's; the frame's timeout bounds the operations, not the answers.
func (s *Server) serveFrame(ctx context.Context, req *gridpb.StreamRequest, out chan<- answer) {
	start := time.Now()
	ids, ops := req.GetIds(), req.GetOps()
	opCtx := ctx
	if ms := req.GetTimeoutMs(); ms > 0 {
		var cancel context.CancelFunc
		opCtx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		defer cancel()
	}
	s.metrics.streamOps.Observe(float64(len(ops)))
	first := make([]*gridpb.OpResult, len(ops))
	err := digest.ValidateBatchLen(len(ops))
	var retryAfter int64
	if l := s.opts.Limits; err == nil && l != nil {
		if rl := l.admit(gridpb.Grid_Stream_FullMethodName, req); rl != nil {
			err, retryAfter = rl, rl.ms
		}
	}
	var rt *router
	if err == nil {
		rt, err = s.opRouter(opCtx)
	}
	if err != nil {
		for i := range first {
			first[i] = errResult(err)
			first[i].RetryAfterMs = retryAfter
		}
		offer(ctx, out, ids, first)
		return
	}
	p := s.plan(rt, ops, first)
	var invalid []int
	for i, r := range first {
		if r != nil {
			invalid = append(invalid, i)
		}
	}
	if len(invalid) > 0 {
		offer(ctx, out, pick(ids, invalid), pick(first, invalid))
	}
	// Each shard's operations are a part, and the stale reads one more;
	// the parts run on the frame's plan (nothing is validated or digested
	// again) and write their answers at their own positions of first.
	type part struct {
		idx []int
		p   plan
	}
	parts := make([]part, 0, len(p.groups)+1)
	for _, g := range p.groups {
		parts = append(parts, part{g.idx, plan{groups: []*group{g}, targets: p.targets}})
	}
	if len(p.reads) > 0 {
		parts = append(parts, part{p.reads, plan{reads: p.reads, targets: p.targets}})
	}
	run := func(pt part) {
		s.runPlan(opCtx, rt, ops, pt.p, first)
		res := pick(first, pt.idx)
		boundResults(res)
		s.metrics.stage(stageStreamServe, time.Since(start))
		offer(ctx, out, pick(ids, pt.idx), res)
	}
	var wg sync.WaitGroup
	for k, pt := range parts {
		if k == len(parts)-1 {
			run(pt) // the last part on this goroutine: one hand-off less
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(pt)
		}()
	}
	wg.Wait()
}

// pick returns the elements of xs at the positions idx, in that order.
func pick[T any](xs []T, idx []int) []T {
	out := make([]T, len(idx))
	for k, i := range idx {
		out[k] = xs[i]
	}
	return out
}

// offer hands answers to the stream's writer, unless the stream has ended.
func offer(ctx context.Context, out chan<- answer, ids []uint64, results []*gridpb.OpResult) {
	a := answer{ids: ids, results: results, sizes: make([]int, len(results)), ready: time.Now()}
	for i, r := range results {
		a.sizes[i] = r.SizeVT()
	}
	select {
	case out <- a:
	case <-ctx.Done():
	}
}

// The encoded cost of a StreamResponse beside its results' bytes: per
// answer, the longest id varint and a result's field tag and length (up to
// 4 MiB); per frame, the packed ids' tag and length.
const (
	streamEntryBytes = 10 + 1 + 4
	streamFrameBytes = 1 + 4
)

// writeAnswers sends the answers of out on st until out is closed. It
// takes every answer ready when it sends, so that answers ready together
// go out in one frame, and starts a new frame where one would pass
// maxBatchResponse. After a failed send it calls stop, which ends the
// stream's operations, and drops what comes after, so that no sender
// blocks; it returns that send's error.
func (s *Server) writeAnswers(st gridpb.Grid_StreamServer, out <-chan answer, stop func()) error {
	var failed error
	frame := &gridpb.StreamResponse{}
	size := streamFrameBytes
	var readies []time.Time // of the answers in frame
	flush := func() {
		if len(frame.Ids) == 0 || failed != nil {
			return
		}
		s.metrics.streamAnswers.Observe(float64(len(frame.Ids)))
		if err := st.Send(frame); err != nil {
			failed = fmt.Errorf("api: stream send: %w", err)
			stop()
		}
		sent := time.Now()
		for _, r := range readies {
			s.metrics.stage(stageStreamWrite, sent.Sub(r))
		}
		frame, size, readies = &gridpb.StreamResponse{}, streamFrameBytes, readies[:0]
	}
	add := func(a answer) {
		if failed != nil {
			return
		}
		readies = append(readies, a.ready)
		for i, r := range a.results {
			if size+a.sizes[i]+streamEntryBytes > maxBatchResponse {
				flush()
			}
			frame.Ids = append(frame.Ids, a.ids[i])
			frame.Results = append(frame.Results, r)
			size += a.sizes[i] + streamEntryBytes
		}
	}
	for a := range out {
		add(a)
	ready:
		for {
			select {
			case b, ok := <-out:
				if !ok {
					break ready
				}
				add(b)
			default:
				break ready
			}
		}
		flush()
	}
	return failed
}
