// Package gridtest starts real grid nodes in-process for tests (node.Start):
// real shards on real Raft and Pebble in a temporary directory, a real gRPC
// server on a free loopback port.
package gridtest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/l4xg/grid/node"
	"github.com/l4xg/grid/shard"
)

// Options tune a test node. Zero values are defaults.
type Options struct {
	Shards int
	// Clock is the node's time source, for tests that move time.
	Clock func() time.Time
	// TickInterval of the shards' leader tick.
	TickInterval time.Duration
	// Sync makes the Raft log fsync as in production (default off: faster).
	Sync bool
	// HTTP also serves /metrics, /healthz, /readyz on a free port.
	HTTP bool
}

// Node is a running test node.
type Node struct {
	*node.Node
	t    testing.TB
	dir  string
	opts Options
}

// Start starts a node in t.TempDir() and waits until it serves. It stops
// when the test ends.
func Start(t testing.TB, opts ...Options) *Node {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	n := &Node{t: t, dir: t.TempDir(), opts: o}
	n.start("127.0.0.1:0")
	t.Cleanup(func() { n.Close() })
	return n
}

func (n *Node) start(listen string) {
	n.t.Helper()
	cfg := node.Config{
		Host: shard.HostConfig{
			DataDir:      n.dir,
			Shards:       n.opts.Shards,
			Clock:        n.opts.Clock,
			TickInterval: n.opts.TickInterval,
			NoSync:       !n.opts.Sync,
		},
		Listen: listen,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if n.opts.HTTP {
		cfg.HTTPListen = "127.0.0.1:0"
	}
	nd, err := node.Start(cfg)
	if err != nil {
		n.t.Fatalf("gridtest: start node: %v", err)
	}
	n.Node = nd
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := nd.WaitReady(ctx); err != nil {
		n.t.Fatalf("gridtest: node not ready: %v", err)
	}
}

// Dir is the node's data directory.
func (n *Node) Dir() string { return n.dir }

// Restart stops the node cleanly and starts it again on the same data
// directory and the same client address.
func (n *Node) Restart() {
	n.t.Helper()
	addr := n.Addr()
	n.Close()
	n.start(addr)
}

// Close stops the node; safe to call twice.
func (n *Node) Close() {
	if n.Node == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Stop(ctx); err != nil {
		n.t.Errorf("gridtest: stop node: %v", err)
	}
}

// ClosedAddr returns a loopback address that was just listening and is now
// closed: connections to it are refused.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
