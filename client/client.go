package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Client is a connection to a grid. It is safe for concurrent use; share one
// per process so that concurrent calls batch together.
type Client struct {
	cfg  config
	conn *grpc.ClientConn
	rpc  gridpb.GridClient
	b    *batcher // nil without batching

	root      context.Context // cancelled by Close
	stop      context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

// Dial creates a Client of the grid node at addr ("host:port"). It does not
// wait for the connection: the first call connects, and a grid that cannot be
// reached shows as ErrUnavailable on calls. ctx bounds the setup only.
//
// Every operation goes to addr. Routing batches straight to shard leaders
// (DESIGN.md section 5) waits for the cluster map in the protocol.
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
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes)),
		// Reconnect within seconds after an outage (gRPC's default backoff
		// grows to 2 minutes, far past a failover).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, cfg.dialOpts...)
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %s: %w", ErrInvalidArgument, addr, err)
	}
	c := newClient(cfg, conn, gridpb.NewGridClient(conn))
	conn.Connect()
	return c, nil
}

func newClient(cfg config, conn *grpc.ClientConn, rpc gridpb.GridClient) *Client {
	root, stop := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, conn: conn, rpc: rpc, root: root, stop: stop}
	if cfg.batching {
		c.b = newBatcher(func(ctx context.Context, req *gridpb.BatchRequest) (*gridpb.BatchResponse, error) {
			return rpc.Batch(ctx, req)
		}, cfg.maxBatch, cfg.maxInFlight)
	}
	return c
}

// Close fails the calls still waiting with ErrClosed and closes the
// connection. Operations already sent may still take effect on the grid.
// Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.stop()
		if c.b != nil {
			c.b.close()
		}
		if c.conn != nil {
			c.closeErr = c.conn.Close()
		}
	})
	return c.closeErr
}

// Status describes the node the client is connected to and its shards.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var resp *gridpb.StatusResponse
	_, err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.Status(ctx, &gridpb.StatusRequest{})
		return err
	})
	if err != nil {
		return Status{}, err
	}
	return statusFromPB(resp), nil
}

// do runs one operation, through the batcher or as a unary RPC, retrying
// while the grid is unavailable. sends is how many times it was sent.
func (c *Client) do(ctx context.Context, op *gridpb.Op) (res *gridpb.OpResult, sends int, err error) {
	if c.b != nil {
		sends, err = c.retryLoop(ctx, func() error {
			var err error
			res, err = c.b.submit(ctx, op)
			return err
		})
		return res, sends, err
	}
	sends, err = c.retry(ctx, func(ctx context.Context) error {
		var err error
		res, err = unary(ctx, c.rpc, op)
		return err
	})
	return res, sends, err
}

// retry runs a unary RPC under the retry policy. The RPC's context is ctx,
// also cancelled by Close; gRPC errors are mapped to the client's errors.
func (c *Client) retry(ctx context.Context, rpc func(context.Context) error) (int, error) {
	return c.retryLoop(ctx, func() error {
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
	})
}

// retryLoop calls send until it succeeds, fails for good, the attempts of the
// policy are spent or ctx ends. It reports how many times send was called.
func (c *Client) retryLoop(ctx context.Context, send func() error) (int, error) {
	p := c.cfg.retry
	for sends := 1; ; sends++ {
		if c.root.Err() != nil {
			return sends - 1, ErrClosed
		}
		err := send()
		if err == nil || !retryable(err) || sends >= p.Attempts {
			return sends, err
		}
		t := time.NewTimer(p.backoff(sends))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return sends, fmt.Errorf("%w (last error: %w)", ctxErr(ctx), err)
		case <-c.root.Done():
			t.Stop()
			return sends, ErrClosed
		}
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
