package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/grpc"
)

// node is one grid node the client talks to: one gRPC connection and, with
// automatic batching, the batcher that coalesces the calls routed to it.
type node struct {
	addr string
	conn *grpc.ClientConn
	rpc  gridpb.GridClient
	b    *batcher // nil without batching
}

// nodeSet holds the nodes the client has opened, by gRPC address. A node is
// opened on first use (a seed at Dial, a shard leader when an operation is
// routed to it) and kept until Close: connections are few (one per node of
// the cluster) and gRPC lets an unused one go idle by itself.
type nodeSet struct {
	open func(addr string) (*node, error)

	mu     sync.Mutex
	byAddr map[string]*node
	closed bool
}

func newNodeSet(open func(addr string) (*node, error)) *nodeSet {
	return &nodeSet{open: open, byAddr: map[string]*node{}}
}

// get returns the node at addr, opening it if needed. Opening does not
// connect: the first RPC does.
func (s *nodeSet) get(addr string) (*node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if n := s.byAddr[addr]; n != nil {
		return n, nil
	}
	n, err := s.open(addr)
	if err != nil {
		return nil, err
	}
	s.byAddr[addr] = n
	return n, nil
}

// close fails the calls waiting in every batcher with ErrClosed and closes
// every connection. get fails with ErrClosed afterwards.
func (s *nodeSet) close() error {
	s.mu.Lock()
	s.closed = true
	all := s.byAddr
	s.byAddr = nil
	s.mu.Unlock()
	var errs []error
	for _, n := range all {
		if n.b != nil {
			n.b.close()
		}
		errs = append(errs, n.conn.Close())
	}
	return errors.Join(errs...)
}

// batchRPC sends one Batch RPC to n, with ctx also cancelled by Close, and
// checks that it answers every operation.
func (c *Client) batchRPC(ctx context.Context, n *node, ops []*gridpb.Op) (*gridpb.BatchResponse, error) {
	var resp *gridpb.BatchResponse
	var left leftCheck
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		resp, err = n.rpc.Batch(c.outgoing(ctx), &gridpb.BatchRequest{Ops: ops}, left.option())
		return left.mark(err)
	})
	if err == nil && len(resp.GetResults()) != len(ops) {
		err = fmt.Errorf("%w: %d results for %d operations", errProtocol, len(resp.GetResults()), len(ops))
	}
	return resp, err
}

// batchOnce is batchRPC bounded by the send timeout on a cluster, as
// sendOnce is for one operation.
func (c *Client) batchOnce(ctx context.Context, n *node, ops []*gridpb.Op) (*gridpb.BatchResponse, error) {
	d := c.sendTimeout()
	if d == 0 {
		return c.batchRPC(ctx, n, ops)
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	resp, err := c.batchRPC(sctx, n, ops)
	return resp, timedOut(ctx, sctx, n.addr, d, err)
}
