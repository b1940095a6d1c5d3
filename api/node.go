package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/raftlog"
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
	// Cluster, if set, makes the node a member of a cluster; nil runs a
	// standalone node holding every shard.
	Cluster *ClusterConfig
}

// ClusterConfig is what a node needs to join or form a cluster. Zero
// values are defaults.
type ClusterConfig struct {
	// RaftListen carries the Raft traffic of all the node's groups
	// (default 127.0.0.1:7421); RaftAdvertise is what peers dial (default:
	// the bound address).
	RaftListen    string
	RaftAdvertise string
	// GossipListen (default 127.0.0.1:7422) and GossipAdvertise: memberlist.
	GossipListen    string
	GossipAdvertise string
	// Advertise is the client gRPC address other nodes and clients use
	// (default: the bound address).
	Advertise string
	// Join lists gossip addresses of existing members.
	Join []string
	// BootstrapExpect: form a new cluster once this many nodes have met (0:
	// only join an existing one).
	BootstrapExpect int
	// Replicas per shard (default 3), fixed at bootstrap.
	Replicas    int
	GracePeriod time.Duration
	Gossip      cluster.GossipTiming
	// HeartbeatTimeout of every Raft group (default 500 ms).
	HeartbeatTimeout time.Duration
	// Faults injects network faults into the Raft traffic (tests only).
	Faults *raftlog.Faults
	// GossipFaults injects network faults into the gossip traffic (tests
	// only).
	GossipFaults *cluster.GossipFaults
	// WrapRemote, if set, wraps the cluster.Remote the control leader
	// reaches the other nodes with (tests only: to watch what it sends).
	WrapRemote func(cluster.Remote) cluster.Remote
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
	mux      *raftlog.Mux  // cluster mode only
	cluster  *cluster.Node // cluster mode only
	peers    *Peers        // cluster mode only
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
	n := &Node{cfg: cfg}
	var err error
	if n.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("api: listen %s: %w", cfg.Listen, err)
	}
	if cfg.HTTPListen != "" {
		if n.httpLis, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			n.lis.Close()
			return nil, fmt.Errorf("api: http listen %s: %w", cfg.HTTPListen, err)
		}
	}
	if err := n.open(reg); err != nil {
		n.lis.Close()
		if n.httpLis != nil {
			n.httpLis.Close()
		}
		return nil, err
	}
	n.grpc = n.server.NewGRPCServer()
	if cfg.HTTPListen != "" {
		n.http = &http.Server{Handler: n.httpHandler(reg), ReadHeaderTimeout: HandshakeTimeout}
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

// open starts the host and, in cluster mode, the Raft mux and the cluster
// runtime, then the API server over them. The listeners are open already:
// the cluster gossips the client address.
func (n *Node) open(reg *prometheus.Registry) error {
	cfg := n.cfg
	opts := Options{Version: cfg.Version, Registry: reg}
	if cfg.Cluster == nil {
		host, err := shard.OpenHost(cfg.Host)
		if err != nil {
			return err
		}
		n.host = host
		opts.Clock = host.Clock
		n.server = NewServer(host, opts)
		n.server.SetServing(false)
		reg.MustRegister(newClockCollector(host, nil))
		return nil
	}
	cc := *cfg.Cluster
	if cc.RaftListen == "" {
		cc.RaftListen = DefaultRaftListen
	}
	if cc.GossipListen == "" {
		cc.GossipListen = cluster.DefaultGossipAddr
	}
	mux, err := raftlog.ListenMux(cc.RaftListen, raftlog.MuxConfig{Advertise: cc.RaftAdvertise, Faults: cc.Faults, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	hc := cfg.Host
	hc.Manual, hc.Mux, hc.HeartbeatTimeout = true, mux, cc.HeartbeatTimeout
	// The node measures the clock that stamps its shards' entries against
	// its peers', over gossip; its shards refuse leases while it is
	// outside the bound.
	offsets, err := cluster.NewClockOffsets(cluster.ClockOffsetsConfig{Clock: hc.Clock, MaxOffset: hc.MaxClockOffset, Timing: cc.Gossip})
	if err != nil {
		mux.Close()
		return err
	}
	hc.PeerClocks = offsets
	host, err := shard.OpenHost(hc)
	if err != nil {
		mux.Close()
		return err
	}
	grpcAddr := cc.Advertise
	if grpcAddr == "" {
		grpcAddr = n.lis.Addr().String()
	}
	httpAddr := ""
	if n.httpLis != nil {
		httpAddr = n.httpLis.Addr().String()
	}
	peers := NewPeers()
	var remote cluster.Remote = peers
	if cc.WrapRemote != nil {
		remote = cc.WrapRemote(peers)
	}
	cn, err := cluster.Start(cluster.Config{
		ID: cluster.NodeID(hc.NodeID), GRPCAddr: grpcAddr, HTTPAddr: httpAddr,
		Host: host, Mux: mux, Logs: host.Logs(), SnapshotDir: filepath.Join(hc.DataDir, "snapshots"),
		GossipListen: cc.GossipListen, GossipAdvertise: cc.GossipAdvertise, Join: cc.Join, GossipFaults: cc.GossipFaults,
		BootstrapExpect: cc.BootstrapExpect, Replicas: cc.Replicas, GracePeriod: cc.GracePeriod,
		Gossip: cc.Gossip, HeartbeatTimeout: cc.HeartbeatTimeout, Remote: remote, Logger: cfg.Logger,
		ClockOffsets: offsets,
	})
	if err != nil {
		peers.Close()
		host.Close()
		mux.Close()
		return err
	}
	n.host, n.mux, n.cluster, n.peers = host, mux, cn, peers
	opts.Cluster, opts.Peers, opts.ClockOffsets, opts.Clock = cn, peers, offsets, host.Clock
	n.server = NewServer(host, opts)
	n.server.SetServing(false)
	reg.MustRegister(newClockCollector(host, offsets))
	return nil
}

// HandshakeTimeout bounds how long a new connection to any of a node's
// ports may take to say what it is before the node closes it: the HTTP/2
// preface and settings on the gRPC port (NewGRPCServer), the request
// headers on the HTTP port, the mux header on the Raft port. A peer that
// opens connections and sends half a greeting holds each one this long at
// most.
const HandshakeTimeout = raftlog.DefaultHeaderTimeout

// DefaultRaftListen is where a cluster node's Raft mux listens unless told.
const DefaultRaftListen = "127.0.0.1:7421"

// RaftAddr is the advertised address of the node's Raft mux ("" on a
// standalone node).
func (n *Node) RaftAddr() string {
	if n.mux == nil {
		return ""
	}
	return n.mux.Addr().String()
}

// Cluster is the node's cluster runtime, nil on a standalone node.
func (n *Node) Cluster() *cluster.Node { return n.cluster }

// ready reports whether the node serves: standalone, every shard leads;
// in a cluster, cluster.Node.Ready: its map is current, it is not removed,
// and each replica the map gives it is a voter caught up with its leader.
func (n *Node) ready() bool {
	if n.cluster != nil {
		return n.cluster.Ready()
	}
	return n.host.Ready()
}

// reportHealth keeps the gRPC health status in line with the shards: SERVING
// while every shard has a serving leader, NOT_SERVING otherwise.
func (n *Node) reportHealth(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	serving := false
	for {
		if ready := n.ready(); ready != serving {
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
		if n.cluster != nil {
			// Cached by the cluster runtime's replica loop: cheap.
			if ok, why := n.cluster.Readiness(); !ok {
				http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
				return
			}
		} else if !n.ready() {
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

// WaitReady blocks until the node serves (see ready), or ctx ends.
func (n *Node) WaitReady(ctx context.Context) error {
	if n.cluster == nil {
		return n.host.WaitReady(ctx)
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !n.ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("api: node not ready: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

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
		if n.cluster != nil {
			// Leave first: the others see a departure, not a failure, and
			// the control group's leadership moves on; then the shards
			// hand their leaderships over as they close.
			n.cluster.Leave(time.Second)
			_ = n.cluster.Close()
		}
		err = n.host.Close()
		if n.cluster != nil {
			n.peers.Close()
			_ = n.mux.Close()
		}
		n.wg.Wait()
	})
	return err
}
