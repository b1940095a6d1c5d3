package client

import (
	"context"
	"errors"
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
	"google.golang.org/grpc/peer"
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

	stats callStats // of automatic batching (Stats)

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
		// grid.proto's generated marshalling (gridpb.Codec), the same
		// bytes as gRPC's proto codec at a third of its CPU.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes), grpc.ForceCodecV2(gridpb.Codec{})),
		// Fixed HTTP/2 windows, as large as gRPC's estimation grows them
		// (16 MiB), turn that estimation off: under load it sent a PING
		// and got an ack about once per round trip, a quarter of a node's
		// socket system calls (bench/README.md). The node does the same.
		grpc.WithInitialWindowSize(4 << 20),
		grpc.WithInitialConnWindowSize(16 << 20),
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
		unary := func(ctx context.Context, req *gridpb.BatchRequest) (*gridpb.BatchResponse, error) {
			var left leftCheck
			resp, err := n.rpc.Batch(c.outgoing(ctx), req, left.option())
			return resp, left.mark(err)
		}
		var car carrier = newUnaryCarrier(unary, c.cfg.maxInFlight)
		if c.cfg.streaming {
			car = newStreamCarrier(func(ctx context.Context) (gridpb.Grid_StreamClient, error) {
				return n.rpc.Stream(c.outgoing(ctx))
			}, unary)
		}
		n.b = newBatcher(car, c.cfg.maxBatch, &c.stats)
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
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.seed.rpc.Status(ctx, &gridpb.StatusRequest{})
		return err
	})
	if err != nil {
		return Status{}, err
	}
	return statusFromPB(resp), nil
}

// sendTo sends one operation to node n, through its batcher or as a unary
// RPC. The error of a refusal carries the node's Redirect, if any.
func (c *Client) sendTo(ctx context.Context, n *node, op *gridpb.Op) (*gridpb.OpResult, error) {
	if n.b != nil && !unbatched(ctx) {
		return n.b.submit(ctx, op)
	}
	var res *gridpb.OpResult
	var left leftCheck
	err := c.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = unary(c.outgoing(ctx), n.rpc, op, left.option())
		return left.mark(err)
	})
	return res, err
}

// sendOnce is one send of op to node n, bounded by the send timeout on a
// cluster. A send without an answer by then fails as unavailable (and may
// have been applied, unless it never left).
func (c *Client) sendOnce(ctx context.Context, n *node, op *gridpb.Op) (*gridpb.OpResult, error) {
	d := c.sendTimeout()
	if d == 0 {
		return c.sendTo(ctx, n, op)
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	res, err := c.sendTo(sctx, n, op)
	return res, timedOut(ctx, sctx, n.addr, d, err)
}

// sendTimeout is the bound of one send: the configured one on a cluster,
// none where there is no other node to go to.
func (c *Client) sendTimeout() time.Duration {
	if !c.r.clustered() {
		return 0
	}
	return c.cfg.sendTimeout
}

// timedOut turns the error of a send whose own deadline (sctx) passed while
// the caller's ctx lasts into an Unavailable naming the node. The send may
// have been applied, unless it never left.
func timedOut(ctx, sctx context.Context, addr string, d time.Duration, err error) error {
	if err == nil || sctx.Err() == nil || ctx.Err() != nil {
		return err
	}
	e := fmt.Errorf("%w: %s did not answer within the send timeout %v", ErrUnavailable, addr, d)
	if neverSent(err) {
		return unsent(e)
	}
	return e
}

// retry runs an RPC that is no operation (Status, Drain, a cluster map)
// under the retry policy, while the grid is unavailable; its error is
// labelled by ending, as an operation's is.
func (c *Client) retry(ctx context.Context, rpc func(context.Context) error) error {
	p := c.cfg.retry
	first := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.call(ctx, rpc)
		if err == nil || !retryable(err) {
			return ending(err, !neverSent(err), refusal(err))
		}
		ceiling, ok := p.again(attempt, time.Since(first))
		if !ok {
			return ending(err, true, false)
		}
		if perr := c.pause(ctx, jitter(ceiling)); perr != nil {
			if perr != ErrClosed {
				perr = fmt.Errorf("%w (last error: %w)", ctxDone(ctx), err)
			}
			return ending(perr, true, false)
		}
	}
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

// leftCheck tells whether an RPC reached a connection: a call option that
// gRPC fills in only when the request was given to a transport. An RPC
// that failed without one (connection refused, still connecting at its
// deadline) never left, so nothing was applied.
type leftCheck struct{ p peer.Peer }

func (l *leftCheck) option() grpc.CallOption { return grpc.Peer(&l.p) }

// mark marks err unsent when the RPC never left.
func (l *leftCheck) mark(err error) error {
	if err != nil && l.p.Addr == nil {
		return unsent(err)
	}
	return err
}

// gaveUp reports an error that is no answer of the grid: the caller's
// context ended or the client closed.
func gaveUp(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed)
}

// unknownIf labels err outcome unknown when maybe is set (a send may have
// been applied), unless it is labelled already.
func unknownIf(maybe bool, err error) error {
	if !maybe || errors.Is(err, errUnknown) {
		return err
	}
	return fmt.Errorf("%w: %w", errUnknown, err)
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
func unary(ctx context.Context, rpc gridpb.GridClient, op *gridpb.Op, opts ...grpc.CallOption) (*gridpb.OpResult, error) {
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		return rpc.Reserve(ctx, o.Reserve, opts...)
	case *gridpb.Op_Complete:
		return rpc.Complete(ctx, o.Complete, opts...)
	case *gridpb.Op_Fail:
		return rpc.Fail(ctx, o.Fail, opts...)
	case *gridpb.Op_Release:
		return rpc.Release(ctx, o.Release, opts...)
	case *gridpb.Op_Extend:
		return rpc.Extend(ctx, o.Extend, opts...)
	case *gridpb.Op_Get:
		return rpc.Get(ctx, o.Get, opts...)
	case *gridpb.Op_Forget:
		return rpc.Forget(ctx, o.Forget, opts...)
	default:
		return nil, status.Error(codes.InvalidArgument, "empty operation")
	}
}
