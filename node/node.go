package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/internal/buildinfo"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/shard"
)

// Config describes a serving node: its shards, its client port and its
// HTTP port. Zero values are defaults.
type Config struct {
	Host shard.HostConfig
	// TracerProvider, when set, traces the gRPC server (a span per RPC);
	// nil: no tracing.
	TracerProvider trace.TracerProvider
	// TLS of the client, HTTP and Raft ports; zero: plaintext.
	TLS TLSConfig
	// Auth, if set, turns on bearer-token auth of the client port.
	Auth *AuthConfig
	// RateLimit, if above 0, limits each namespace to this many operations
	// a second (api.RateLimiter); 0: no limit.
	RateLimit float64
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
	// Knobs are the hooks tests reach into a node with; production
	// leaves them zero.
	Knobs TestingKnobs
}

// TestingKnobs are the hooks tests reach into a node with (CockroachDB's
// name for the same idea): each is nil unless a test sets it, and
// gridnode never does.
type TestingKnobs struct {
	// WrapListener wraps the client gRPC listener: to cut the client port
	// while the node's replicas go on.
	WrapListener func(net.Listener) net.Listener
	// RaftFaults injects network faults into a cluster member's Raft
	// traffic.
	RaftFaults *raftlog.Faults
	// GossipFaults injects network faults into its gossip traffic.
	GossipFaults *gossip.Faults
	// WrapRemote wraps the cluster.Remote its control leader reaches the
	// other nodes with: to watch what it sends.
	WrapRemote func(cluster.Remote) cluster.Remote
	// WrapView wraps the cluster runtime as its API server sees it: to
	// show the server another map or gossip view.
	WrapView func(api.ClusterView) api.ClusterView
	// RateLimitClock is the clock the rate limiter refills its buckets
	// by (nil: time.Now): a test holds it still to know what is refused.
	RateLimitClock func() time.Time
}

// ClusterConfig is what a node needs to join or form a cluster. Zero
// values are defaults.
type ClusterConfig struct {
	// RaftListen carries the Raft traffic of all the node's groups
	// (default DefaultRaftListen); RaftAdvertise is what peers dial
	// (default: the bound address).
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
	Gossip      gossip.Timing
	// HeartbeatTimeout of every Raft group (default 500 ms).
	HeartbeatTimeout time.Duration
	// GossipEncryption, if set, encrypts the gossip with its keys.
	GossipEncryption *gossip.Encryption
}

// HandshakeTimeout bounds how long a new connection to any of a node's
// ports may take to say what it is before the node closes it: the HTTP/2
// preface and settings on the gRPC port, the request headers on the HTTP
// port, the mux header on the Raft port. A peer that opens connections and
// sends half a greeting holds each one this long at most.
const HandshakeTimeout = raftlog.DefaultHeaderTimeout

// DefaultRaftListen is where a cluster node's Raft mux listens unless told.
const DefaultRaftListen = "127.0.0.1:7421"

// Node is one running grid process: its host, its gRPC and HTTP servers
// and, in a cluster, its Raft mux and cluster runtime.
type Node struct {
	cfg      Config
	host     *shard.Host
	server   *api.Server
	grpc     *grpc.Server
	http     *http.Server
	lis      net.Listener
	httpLis  net.Listener
	mux      *raftlog.Mux     // cluster mode only
	cluster  *cluster.Runtime // cluster mode only
	peers    *api.Peers       // cluster mode only
	tls      nodeTLS
	auth     *api.Authorizer // nil: auth off
	wg       sync.WaitGroup
	stopOnce sync.Once
	cancel   context.CancelFunc // ends background work at Stop
}

// Start opens the data directory, starts the shards and begins serving.
// Readiness (all shards leading) follows shortly; see WaitReady.
func Start(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoMetric(cfg.Version))
	cfg.Host.Registry = reg
	if cfg.Host.Logger == nil {
		cfg.Host.Logger = cfg.Logger
	}
	n := &Node{cfg: cfg}
	var err error
	if n.tls, err = loadTLS(cfg.TLS, cfg.Logger); err != nil {
		return nil, err
	}
	if n.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("node: listen %s: %w", cfg.Listen, err)
	}
	if cfg.Knobs.WrapListener != nil {
		n.lis = cfg.Knobs.WrapListener(n.lis)
	}
	if cfg.HTTPListen != "" {
		if n.httpLis, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			n.lis.Close()
			return nil, fmt.Errorf("node: http listen %s: %w", cfg.HTTPListen, err)
		}
		if n.tls.client != nil {
			// HTTPS with the client port's certificate; no client
			// certificate asked (probes and scrapers have none).
			n.httpLis = tls.NewListener(n.httpLis, serverTLS(n.tls.client, false, nil))
		}
	}
	opts := api.Options{Version: cfg.Version, Registry: reg}
	if cfg.Auth != nil {
		if n.auth, err = api.NewAuthorizer(cfg.Auth.Tokens, cfg.Auth.auditLog()); err != nil {
			n.lis.Close()
			if n.httpLis != nil {
				n.httpLis.Close()
			}
			return nil, err
		}
	}
	opts.Auth = n.auth
	if cfg.RateLimit > 0 {
		opts.Limits = api.NewRateLimiter(cfg.RateLimit, cfg.Knobs.RateLimitClock)
	}
	if cfg.Cluster == nil {
		err = n.openStandalone(opts)
	} else {
		err = n.openCluster(opts)
	}
	if err != nil {
		n.lis.Close()
		if n.httpLis != nil {
			n.httpLis.Close()
		}
		return nil, err
	}
	n.server.SetServing(false)
	// A connection that has not completed its HTTP/2 preface and settings
	// by then is closed (gRPC's default waits 120 s).
	serverOpts := []grpc.ServerOption{grpc.ConnectionTimeout(HandshakeTimeout)}
	if n.tls.client != nil {
		// Clients, and other nodes presenting their peer certificates.
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(
			serverTLS(n.tls.client, cfg.TLS.ClientCertAuth, nil, n.tls.client, n.tls.peer))))
	}
	if cfg.TracerProvider != nil {
		// A span per RPC, continuing the caller's W3C trace context.
		serverOpts = append(serverOpts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(cfg.TracerProvider), otelgrpc.WithPropagators(propagation.TraceContext{}))))
	}
	n.grpc = n.server.NewGRPCServer(serverOpts...)
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

// RaftAddr is the advertised address of the node's Raft mux ("" on a
// standalone node).
func (n *Node) RaftAddr() string {
	if n.mux == nil {
		return ""
	}
	return n.mux.Addr().String()
}

// Cluster is the node's cluster runtime, nil on a standalone node.
func (n *Node) Cluster() *cluster.Runtime { return n.cluster }

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

// ready reports whether the node serves: standalone, every shard leads;
// in a cluster, cluster.Runtime.Ready: its map is current, it is not removed,
// and each replica the map gives it is a voter caught up with its leader.
func (n *Node) ready() bool {
	if n.cluster != nil {
		return n.cluster.Ready()
	}
	return n.host.Ready()
}

// reportHealth keeps the gRPC health status in line with the shards: SERVING
// while the node is ready, NOT_SERVING otherwise.
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
			return fmt.Errorf("node: not ready: %w", ctx.Err())
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
		if n.mux != nil {
			// From here on the peers going away is expected: when the
			// whole cluster stops, each node's groups outlive some of
			// their peers' by up to a second or two.
			n.mux.MarkStopping()
		}
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

// buildInfoMetric is l4xg_grid_build_info: 1, labelled with what the
// binary was built from (the version the build set, the commit, the Go
// version), so that a dashboard shows which build each node runs.
func buildInfoMetric(version string) prometheus.Collector {
	bi := buildinfo.Read(version)
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "l4xg_grid_build_info",
		Help:        "1, labelled with the version, commit and Go version the node's binary was built from.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "commit": bi.CommitLabel(), "go_version": bi.GoVersion},
	})
	g.Set(1)
	return g
}
