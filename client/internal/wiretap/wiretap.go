// Package wiretap lets the client's tests see and change what passes
// between a client and a node: the operations each RPC or stream frame
// carries, the answers, and an answer lost after the node applied it. It
// is for tests only; it imports neither the client nor the server, so the
// client's own tests and the tests against a real node share it.
package wiretap

import (
	"bytes"
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
)

// OpKey returns the kind of an operation ("reserve", "complete", ...) and
// its key, without the namespace.
func OpKey(op *gridpb.Op) (kind, key string) {
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		return "reserve", string(o.Reserve.GetKey())
	case *gridpb.Op_Complete:
		return "complete", string(o.Complete.GetKey())
	case *gridpb.Op_Fail:
		return "fail", string(o.Fail.GetKey())
	case *gridpb.Op_Release:
		return "release", string(o.Release.GetKey())
	case *gridpb.Op_Extend:
		return "extend", string(o.Extend.GetKey())
	case *gridpb.Op_Get:
		return "get", string(o.Get.GetKey())
	case *gridpb.Op_Forget:
		return "forget", string(o.Forget.GetKey())
	}
	return "", ""
}

// OpsOf returns the operations of a unary RPC's request: a Batch's, or the
// one of a single-operation RPC; or those a stream's answer frame answers
// (see Intercept).
func OpsOf(req any) []*gridpb.Op {
	switch r := req.(type) {
	case *gridpb.BatchRequest:
		return r.GetOps()
	case *gridpb.StreamRequest:
		return r.GetOps()
	case *gridpb.ReserveRequest:
		return []*gridpb.Op{{Op: &gridpb.Op_Reserve{Reserve: r}}}
	case *gridpb.ExtendRequest:
		return []*gridpb.Op{{Op: &gridpb.Op_Extend{Extend: r}}}
	}
	return nil
}

// Carries reports whether an RPC's request holds an operation of kind.
func Carries(req any, kind string) bool {
	for _, op := range OpsOf(req) {
		if k, _ := OpKey(op); k == kind {
			return true
		}
	}
	return false
}

// After runs once a node answered an RPC or a stream frame: req is the
// request (for a frame, a StreamRequest of the operations the frame
// answers), reply the answer, err the RPC's error. What it returns replaces
// err: it may delay the answer or lose it.
type After func(ctx context.Context, method string, req, reply any, err error) error

// Intercept returns the dial options that run after around every unary RPC
// and every answer frame of a stream. An error from after on a frame breaks
// the stream, as a connection reset would.
func Intercept(after After) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				return after(ctx, method, req, reply, err)
			}),
		grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					return cs, err
				}
				return &frameHook{ClientStream: cs, method: method, after: after, sent: map[uint64]*gridpb.Op{}}, nil
			}),
	}
}

// frameHook is Intercept's hook on a stream: it keeps the operations sent
// by id, and shows after each answer frame with the operations it answers.
type frameHook struct {
	grpc.ClientStream
	method string
	after  After
	mu     sync.Mutex
	sent   map[uint64]*gridpb.Op
}

func (h *frameHook) SendMsg(m any) error {
	if req, ok := m.(*gridpb.StreamRequest); ok {
		h.mu.Lock()
		for i, id := range req.GetIds() {
			h.sent[id] = req.GetOps()[i]
		}
		h.mu.Unlock()
	}
	return h.ClientStream.SendMsg(m)
}

func (h *frameHook) RecvMsg(m any) error {
	err := h.ClientStream.RecvMsg(m)
	resp, ok := m.(*gridpb.StreamResponse)
	if err != nil || !ok {
		return err
	}
	answered := &gridpb.StreamRequest{Ids: resp.GetIds()}
	h.mu.Lock()
	for _, id := range resp.GetIds() {
		answered.Ops = append(answered.Ops, h.sent[id])
		delete(h.sent, id)
	}
	h.mu.Unlock()
	return h.after(h.Context(), h.method, answered, resp, nil)
}

// AnswerDropper drops the answer of the first RPC that carries an
// operation of Kind, after the node applied it, and records, for every RPC
// carrying such an operation, the request ids of its Reserves and the
// answers the node gave.
type AnswerDropper struct {
	Kind string

	mu      sync.Mutex
	dropped bool
	ids     [][][]byte           // per RPC: the request ids of its Reserves
	answers [][]*gridpb.OpResult // per RPC: the node's answers, dropped ones included
}

// DialOptions returns the dial options that make d see a client's RPCs.
func (d *AnswerDropper) DialOptions() []grpc.DialOption {
	return Intercept(func(_ context.Context, _ string, req, reply any, err error) error {
		if !Carries(req, d.Kind) {
			return err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		var ids [][]byte
		for _, op := range OpsOf(req) {
			if r := op.GetReserve(); r != nil {
				ids = append(ids, bytes.Clone(r.GetRequestId()))
			}
		}
		d.ids = append(d.ids, ids)
		var answers []*gridpb.OpResult
		switch r := reply.(type) {
		case *gridpb.BatchResponse:
			answers = r.GetResults()
		case *gridpb.StreamResponse:
			answers = r.GetResults()
		case *gridpb.OpResult:
			answers = []*gridpb.OpResult{r}
		}
		d.answers = append(d.answers, answers)
		if err == nil && !d.dropped {
			d.dropped = true
			return status.Error(codes.Unavailable, "test: connection reset after the request was applied")
		}
		return err
	})
}

// Sent returns the request ids and answers recorded so far.
func (d *AnswerDropper) Sent() ([][][]byte, [][]*gridpb.OpResult) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ids, d.answers
}
