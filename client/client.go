package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Client is a connection to a grid. It is safe for concurrent use; share one
// per process so that concurrent calls batch together.
type Client struct {
	cfg      config
	dialOpts []grpc.DialOption
	nodes    *nodeSet
	seed     *node   // the first address given to Dial: Status and Audit
	r        *router // where each operation goes (router.go)

	root      context.Context // cancelled by Close
	stop      context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

// Dial creates a Client of the grid whose nodes include addr ("host:port"),
// or of one of the comma-separated seed addresses in addr
// ("10.0.0.1:7420,10.0.0.2:7420"). It does not wait for a connection: a grid
// that cannot be reached shows as ErrUnavailable on calls. ctx bounds the
// setup only.
//
// The client asks the seeds for the cluster map in the background. A
// clustered grid's map lets it send each operation straight to the leader
// of its shard; a standalone node (or one older than clustering) gets every
// operation. WithoutRouting sends everything to the first seed instead.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	seeds, err := parseSeeds(addr)
	if err != nil {
		return nil, err
	}
	root, stop := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, root: root, stop: stop}
	c.dialOpts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes)),
		// Reconnect within seconds after an outage (gRPC's default backoff
		// grows to 2 minutes, far past a failover).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, cfg.dialOpts...)
	c.nodes = newNodeSet(c.openNode)
	// Open every seed now, so that a malformed address fails Dial.
	for i, s := range seeds {
		n, err := c.nodes.get(s)
		if err != nil {
			_ = c.nodes.close()
			stop()
			return nil, fmt.Errorf("%w: dial %s: %w", ErrInvalidArgument, s, err)
		}
		if i == 0 {
			c.seed = n
		}
	}
	c.r = newRouter(root, seeds, !cfg.routing, c.askMap)
	c.seed.conn.Connect()
	if cfg.routing {
		c.r.refresh() // in the background: Dial does not wait for the grid
	}
	return c, nil
}

// parseSeeds splits a comma-separated list of addresses.
func parseSeeds(addr string) ([]string, error) {
	var seeds []string
	for s := range strings.SplitSeq(addr, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: dial: no address in %q", ErrInvalidArgument, addr)
	}
	return seeds, nil
}

// openNode opens the connection (and batcher) of one node.
func (c *Client) openNode(addr string) (*node, error) {
	conn, err := grpc.NewClient(addr, c.dialOpts...)
	if err != nil {
		return nil, err
	}
	n := &node{addr: addr, conn: conn, rpc: gridpb.NewGridClient(conn)}
	if c.cfg.batching {
		n.b = newBatcher(func(ctx context.Context, req *gridpb.BatchRequest) (*gridpb.BatchResponse, error) {
			return n.rpc.Batch(c.outgoing(ctx), req)
		}, c.cfg.maxBatch, c.cfg.maxInFlight)
	}
	return n, nil
}

// redirectHeader asks a node to refuse an operation on a shard it does not
// lead with a Redirect instead of forwarding it (api/gridpb/grid.proto).
const redirectHeader = "grid-redirect"

// outgoing marks the context of an operation's RPC: a routing client wants
// Redirects, a client built WithoutRouting lets the node forward.
func (c *Client) outgoing(ctx context.Context) context.Context {
	if !c.cfg.routing {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, redirectHeader, "1")
}

// Close fails the calls still waiting with ErrClosed and closes the
// connections. Operations already sent may still take effect on the grid.
// Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.stop()
		c.r.close()
		c.closeErr = c.nodes.close()
	})
	return c.closeErr
}

// Status describes the node the client dialled (the first seed) and its
// shards.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var resp *gridpb.StatusResponse
	_, err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.seed.rpc.Status(ctx, &gridpb.StatusRequest{})
		return err
	})
	if err != nil {
		return Status{}, err
	}
	return statusFromPB(resp), nil
}

// do runs one operation, routed to its shard's leader, retrying while the
// grid is unavailable. sends is how many of its sends may have been applied:
// a send refused with Redirects only does not count.
func (c *Client) do(ctx context.Context, op *gridpb.Op) (res *gridpb.OpResult, sends int, err error) {
	sends, err = c.retryLoop(ctx, func() (bool, error) {
		var sent bool
		var err error
		res, sent, err = c.send(ctx, op)
		return sent, err
	})
	return res, sends, err
}

// sendTo sends one operation to node n, through its batcher or as a unary
// RPC. The error of a refusal carries the node's Redirect, if any.
func (c *Client) sendTo(ctx context.Context, n *node, op *gridpb.Op) (*gridpb.OpResult, error) {
	if n.b != nil {
		return n.b.submit(ctx, op)
	}
	var res *gridpb.OpResult
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = unary(c.outgoing(ctx), n.rpc, op)
		return err
	})
	return res, err
}

// retry runs a unary RPC under the retry policy; see call.
func (c *Client) retry(ctx context.Context, rpc func(context.Context) error) (int, error) {
	return c.retryLoop(ctx, func() (bool, error) { return true, c.call(ctx, rpc) })
}

// call runs one RPC. Its context is ctx, also cancelled by Close; gRPC
// errors are mapped to the client's errors.
func (c *Client) call(ctx context.Context, rpc func(context.Context) error) error {
	if c.root.Err() != nil {
		return ErrClosed
	}
	callCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.root, cancel)
	err := rpc(callCtx)
	stop()
	cancel()
	if err != nil && ctx.Err() == nil && c.root.Err() != nil {
		return ErrClosed
	}
	return fromRPC(ctx, err)
}

// retryLoop calls send until it succeeds, fails for good, the attempts of the
// policy are spent or ctx ends. send reports whether the grid may have
// applied what it sent; retryLoop returns how many sends may have.
func (c *Client) retryLoop(ctx context.Context, send func() (sent bool, err error)) (int, error) {
	p := c.cfg.retry
	sends := 0
	for attempt := 1; ; attempt++ {
		if c.root.Err() != nil {
			return sends, ErrClosed
		}
		sent, err := send()
		if sent {
			sends++
		}
		if err == nil || !retryable(err) || attempt >= p.Attempts {
			return sends, err
		}
		if perr := c.pause(ctx, p.backoff(attempt)); perr != nil {
			if perr == ErrClosed {
				return sends, perr
			}
			return sends, fmt.Errorf("%w (last error: %w)", perr, err)
		}
	}
}

// pause waits d. It fails with ctxErr when ctx ends first and with ErrClosed
// when the client is closed.
func (c *Client) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-c.root.Done():
		return ErrClosed
	}
}

// unary sends one operation as its own RPC.
func unary(ctx context.Context, rpc gridpb.GridClient, op *gridpb.Op) (*gridpb.OpResult, error) {
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		return rpc.Reserve(ctx, o.Reserve)
	case *gridpb.Op_Complete:
		return rpc.Complete(ctx, o.Complete)
	case *gridpb.Op_Fail:
		return rpc.Fail(ctx, o.Fail)
	case *gridpb.Op_Release:
		return rpc.Release(ctx, o.Release)
	case *gridpb.Op_Extend:
		return rpc.Extend(ctx, o.Extend)
	case *gridpb.Op_Get:
		return rpc.Get(ctx, o.Get)
	case *gridpb.Op_Forget:
		return rpc.Forget(ctx, o.Forget)
	default:
		return nil, status.Error(codes.InvalidArgument, "empty operation")
	}
}
