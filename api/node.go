package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/l4xg/grid/shard"
)

// NodeConfig describes a serving node: its shards, its client port and its
// HTTP port. Zero values are defaults.
type NodeConfig struct {
	Host shard.HostConfig
	// Listen is the client gRPC address; "127.0.0.1:0" picks a free port.
	Listen string
	// HTTPListen serves /metrics, /healthz, /readyz; empty disables it.
	HTTPListen string
	// Pprof adds /debug/pprof/ to the HTTP port.
	Pprof   bool
	Version string
	Logger  *slog.Logger
}

// Node is a running single node: host, gRPC server and HTTP server.
type Node struct {
	cfg      NodeConfig
	host     *shard.Host
	server   *Server
	grpc     *grpc.Server
	http     *http.Server
	lis      net.Listener
	httpLis  net.Listener
	wg       sync.WaitGroup
	stopOnce sync.Once
	cancel   context.CancelFunc // ends background work at Stop
}

// StartNode opens the data directory, starts the shards and begins serving.
// Readiness (all shards leading) follows shortly; see WaitReady.
func StartNode(cfg NodeConfig) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Host.Registry = reg
	if cfg.Host.Logger == nil {
		cfg.Host.Logger = cfg.Logger
	}
	host, err := shard.OpenHost(cfg.Host)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, host: host}
	n.server = NewServer(host, Options{Version: cfg.Version, Registry: reg})
	n.server.SetServing(false)
	n.grpc = n.server.NewGRPCServer()
	if n.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		host.Close()
		return nil, fmt.Errorf("api: listen %s: %w", cfg.Listen, err)
	}
	if cfg.HTTPListen != "" {
		if n.httpLis, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			n.lis.Close()
			host.Close()
			return nil, fmt.Errorf("api: http listen %s: %w", cfg.HTTPListen, err)
		}
		n.http = &http.Server{Handler: n.httpHandler(reg), ReadHeaderTimeout: 5 * time.Second}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.http.Serve(n.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cfg.Logger.Error("http server", "err", err)
			}
		}()
	}
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		if err := n.grpc.Serve(n.lis); err != nil {
			cfg.Logger.Error("grpc server", "err", err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go n.reportHealth(ctx)
	return n, nil
}

// reportHealth keeps the gRPC health status in line with the shards: SERVING
// while every shard has a serving leader, NOT_SERVING otherwise.
func (n *Node) reportHealth(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	serving := false
	for {
		if ready := n.host.Ready(); ready != serving {
			serving = ready
			n.server.SetServing(ready)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) httpHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !n.host.Ready() {
			http.Error(w, "not ready: not every shard has a serving leader", http.StatusServiceUnavailable)
			return
		}
		if err := n.host.ColdHealth(); err != nil {
			http.Error(w, "not ready: cold tier writes failing (applies wait for them): "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	}
	return mux
}

// Addr is the client gRPC address the node listens on.
func (n *Node) Addr() string { return n.lis.Addr().String() }

// HTTPAddr is the HTTP address, or "" when disabled.
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

// Host returns the node's shards.
func (n *Node) Host() *shard.Host { return n.host }

// WaitReady blocks until every shard serves, or ctx ends.
func (n *Node) WaitReady(ctx context.Context) error { return n.host.WaitReady(ctx) }

// Stop drains in-flight RPCs (up to ctx), then stops the shards and closes
// the data directory. Everything acknowledged is already durable.
func (n *Node) Stop(ctx context.Context) error {
	var err error
	n.stopOnce.Do(func() {
		n.cancel()
		n.server.Shutdown()
		done := make(chan struct{})
		go func() {
			n.grpc.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			n.grpc.Stop()
			<-done
		}
		if n.http != nil {
			_ = n.http.Shutdown(ctx)
		}
		err = n.host.Close()
		n.wg.Wait()
	})
	return err
}
