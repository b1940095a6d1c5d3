package api

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/shard"
)

// Options configure the API server. Zero values are defaults.
type Options struct {
	// Version is reported by Status.
	Version string
	// Registry receives the RPC metrics and the node's clock gauges
	// (clock.go); nil registers nothing.
	Registry prometheus.Registerer
	// Clock is the node's time source for Status; default time.Now.
	Clock func() time.Time
	// Cluster is the node's cluster runtime; nil runs a standalone node
	// that holds every shard and serves every operation itself.
	Cluster ClusterView
	// Peers reaches the other nodes to forward operations to. Nil with a
	// Cluster: the server makes its own and closes it on Shutdown; one
	// given here is the caller's to close.
	Peers *Peers
	// ClockOffsets is the node's clock measured against its peers' (nil on
	// a standalone node): Status reports it (clock.go).
	ClockOffsets ClockReporter
	// Auth, if set, checks every Grid call's bearer token (auth.go).
	Auth *Authorizer
	// Limits, if set, limits each namespace's operations (ratelimit.go).
	Limits *RateLimiter
	// Keyring is the node's gossip keyring, nil when gossip is not
	// encrypted (GossipKeys).
	Keyring Keyring
}

// Server implements the Grid gRPC service over the shards of a host. The
// operations are routed in route.go and batch.go; the cluster RPCs live in
// clusterrpc.go.
type Server struct {
	gridpb.UnimplementedGridServer
	host     *shard.Host
	opts     Options
	peers    *Peers // nil on a standalone node
	ownPeers bool   // peers is closed by Shutdown
	metrics  *rpcMetrics
	health   *health.Server
	// closing is closed by Shutdown: open streams end once the frames they
	// read are answered (stream.go), so that GracefulStop does not wait on
	// a client's long-lived stream.
	closing     chan struct{}
	closingOnce sync.Once
}

var _ gridpb.GridServer = (*Server)(nil)

// NewServer returns the service for host.
func NewServer(host *shard.Host, opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	s := &Server{host: host, opts: opts, peers: opts.Peers, metrics: newRPCMetrics(opts.Registry), health: health.NewServer(), closing: make(chan struct{})}
	if opts.Cluster != nil && s.peers == nil {
		s.peers, s.ownPeers = NewPeers(), true
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(newClockCollector(host, opts.ClockOffsets))
		if opts.Cluster != nil {
			opts.Registry.MustRegister(newClusterCollector(opts.Cluster))
		}
	}
	return s
}

// NewGRPCServer returns a gRPC server with the request size limit and the
// metrics interceptor, the Grid service, gRPC health and reflection; extra
// options follow (the node adds its handshake timeout).
func (s *Server) NewGRPCServer(extra ...grpc.ServerOption) *grpc.Server {
	opts := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(digest.MaxRequestBytes),
		grpc.ForceServerCodecV2(gridpb.Codec{}),
		// Fixed HTTP/2 windows turn off gRPC's bandwidth-delay
		// estimation and its PINGs, one a round trip under load (the
		// client does the same; bench/README.md).
		grpc.InitialWindowSize(4 << 20),
		grpc.InitialConnWindowSize(16 << 20),
		grpc.ChainUnaryInterceptor(s.unaryInterceptors()...),
		// Peers keep idle connections alive with pings (see Peers).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: peerKeepaliveTime / 2, PermitWithoutStream: true}),
	}, extra...)
	streams := []grpc.StreamServerInterceptor{s.metrics.stream}
	if s.opts.Auth != nil {
		streams = append(streams, s.opts.Auth.Stream)
	}
	opts = append(opts, grpc.ChainStreamInterceptor(streams...))
	g := grpc.NewServer(opts...)
	gridpb.RegisterGridServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
	s.metrics.grpc.InitializeMetrics(g)
	return g
}

// unaryInterceptors: the metrics see every call, refused ones included.
func (s *Server) unaryInterceptors() []grpc.UnaryServerInterceptor {
	out := []grpc.UnaryServerInterceptor{s.metrics.unary}
	if s.opts.Auth != nil {
		out = append(out, s.opts.Auth.Unary)
	}
	if s.opts.Limits != nil {
		out = append(out, s.opts.Limits.Unary)
	}
	return out
}

// SetServing reports the node's health on the gRPC health service.
func (s *Server) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(gridpb.Grid_ServiceDesc.ServiceName, st)
}

// Shutdown marks the node not serving for good, ends the open streams once
// the frames they read are answered, and closes the peer connections the
// server made itself.
func (s *Server) Shutdown() {
	s.health.Shutdown()
	s.closingOnce.Do(func() { close(s.closing) })
	if s.ownPeers {
		_ = s.peers.Close()
	}
}

// The operation RPCs: each is a batch of one operation (serveOne).

func (s *Server) Reserve(ctx context.Context, r *gridpb.ReserveRequest) (*gridpb.OpResult, error) {
	return s.serveOne(ctx, &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: r}})
}

func (s *Server) Complete(ctx context.Context, r *gridpb.CompleteRequest) (*gridpb.OpResult, error) {
	return s.serveOne(ctx, &gridpb.Op{Op: &gridpb.Op_Complete{Complete: r}})
}

func (s *Server) Fail(ctx context.Context, r *gridpb.FailRequest) (*gridpb.OpResult, error) {
	return s.serveOne(ctx, &gridpb.Op{Op: &gridpb.Op_Fail{Fail: r}})
}

func (s *Server) Release(ctx context.Context, r *gridpb.ReleaseRequest) (*gridpb.OpResult, error) {
	return s.serveOne(ctx, &gridpb.Op{Op: &gridpb.Op_Release{Release: r}})
}

func (s *Server) Extend(ctx context.Context, r *gridpb.ExtendRequest) (*gridpb.OpResult, error) {
	return s.serveOne(ctx, &gridpb.Op{Op: &gridpb.Op_Extend{Extend: r}})
}

func (s *Server) Get(ctx context.Context, r *gridpb.GetRequest) (*gridpb.OpResult, error) {
	return s.serveOne(ctx, &gridpb.Op{Op: &gridpb.Op_Get{Get: r}})
}

func (s *Server) Forget(ctx context.Context, r *gridpb.ForgetRequest) (*gridpb.OpResult, error) {
	return s.serveOne(ctx, &gridpb.Op{Op: &gridpb.Op_Forget{Forget: r}})
}

// Batch validates every operation and sends the operations of each shard,
// linearizable reads included, as one proposal: they share one log entry and
// apply in batch order. The shards run in parallel; stale reads are answered
// locally afterwards. An invalid operation gets its own error result; the
// others still run. In a cluster, the operations of shards this node does
// not lead are forwarded or redirected (batch.go).
func (s *Server) Batch(ctx context.Context, r *gridpb.BatchRequest) (*gridpb.BatchResponse, error) {
	ops := r.GetOps()
	if err := digest.ValidateBatchLen(len(ops)); err != nil {
		return nil, toStatus(err)
	}
	s.metrics.batchOps.Observe(float64(len(ops)))
	rt, err := s.opRouter(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := make([]*gridpb.OpResult, len(ops))
	s.runBatch(ctx, rt, ops, out)
	return &gridpb.BatchResponse{Results: out}, nil
}

// Status describes the node and its shards.
func (s *Server) Status(ctx context.Context, _ *gridpb.StatusRequest) (*gridpb.StatusResponse, error) {
	set := s.host.Settings()
	resp := &gridpb.StatusResponse{
		NodeId:    s.host.NodeID(),
		Version:   s.opts.Version,
		Slots:     set.Slots,
		NowUnixMs: s.opts.Clock().UnixMilli(),
	}
	if cv := s.opts.Cluster; cv != nil {
		if m := cv.Map(); m != nil {
			resp.MapEpoch = m.Epoch
			if info, ok := m.Nodes[cv.Self()]; ok {
				resp.NodeState = info.State.String()
			}
		}
		resp.Ready = cv.Ready()
		resp.ControlState = cv.ControlState()
		resp.ShardCount = uint32(set.Shards)
	}
	for _, sh := range s.host.Replicas() {
		resp.Shards = append(resp.Shards, shardStatusPB(sh.Status()))
	}
	clockStatus(s.host, s.opts.ClockOffsets, resp)
	resp.DiskFull = s.host.DiskFull() != nil
	return resp, nil
}

// shardStatusPB is the protocol's form of a replica's Status.
func shardStatusPB(st shard.Status) *gridpb.ShardStatus {
	out := &gridpb.ShardStatus{
		Id:              uint32(st.ID),
		RaftState:       st.RaftState,
		Leader:          st.Leader,
		Keys:            uint64(st.Keys),
		HotBytes:        uint64(st.HotBytes),
		AppliedIndex:    st.AppliedIndex,
		CommitIndex:     st.CommitIndex,
		LastIndex:       st.LastIndex,
		StampUnixMs:     st.Stamp,
		Term:            st.Term,
		ColdKeys:        uint64(st.Cold.Keys),
		ColdBytes:       uint64(st.Cold.Bytes),
		Suffrage:        st.Suffrage,
		ConfigIndex:     st.ConfigIndex,
		ConfigCommitted: st.ConfigCommitted,
		LastContactMs:   -1,
	}
	if st.LastContact >= 0 {
		out.LastContactMs = st.LastContact.Milliseconds()
	}
	for _, srv := range st.Group { // sorted by id
		out.Group = append(out.Group, &gridpb.GroupMember{Id: string(srv.ID), Voter: srv.Suffrage == raft.Voter})
	}
	return out
}
