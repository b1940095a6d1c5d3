package api

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/shard"
)

// Options configure the API server. Zero values are defaults.
type Options struct {
	// Version is reported by Status.
	Version string
	// Registry receives the RPC metrics; nil registers nothing.
	Registry prometheus.Registerer
	// Clock is the node's time source for Status; default time.Now.
	Clock func() time.Time
}

// Server implements the Grid gRPC service over the shards of a host.
type Server struct {
	gridpb.UnimplementedGridServer
	host    *shard.Host
	opts    Options
	metrics *rpcMetrics
	health  *health.Server
}

var _ gridpb.GridServer = (*Server)(nil)

// NewServer returns the service for host.
func NewServer(host *shard.Host, opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &Server{host: host, opts: opts, metrics: newRPCMetrics(opts.Registry), health: health.NewServer()}
}

// NewGRPCServer returns a gRPC server with the request size limit and the
// metrics interceptor, the Grid service, gRPC health and reflection.
func (s *Server) NewGRPCServer(extra ...grpc.ServerOption) *grpc.Server {
	opts := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(keyspace.MaxRequestBytes),
		grpc.UnaryInterceptor(s.metrics.intercept),
	}, extra...)
	g := grpc.NewServer(opts...)
	gridpb.RegisterGridServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
	return g
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

// Shutdown marks the node not serving for good.
func (s *Server) Shutdown() { s.health.Shutdown() }

func (s *Server) Reserve(ctx context.Context, r *gridpb.ReserveRequest) (*gridpb.OpResult, error) {
	return s.one(ctx)(reserveCommand(r))
}

func (s *Server) Complete(ctx context.Context, r *gridpb.CompleteRequest) (*gridpb.OpResult, error) {
	return s.one(ctx)(completeCommand(r))
}

func (s *Server) Fail(ctx context.Context, r *gridpb.FailRequest) (*gridpb.OpResult, error) {
	return s.one(ctx)(failCommand(r))
}

func (s *Server) Release(ctx context.Context, r *gridpb.ReleaseRequest) (*gridpb.OpResult, error) {
	return s.one(ctx)(settleCommand(keyspace.OpRelease, r.GetNamespace(), r.GetKey(), r.GetEntity(), r.GetToken()))
}

func (s *Server) Extend(ctx context.Context, r *gridpb.ExtendRequest) (*gridpb.OpResult, error) {
	return s.one(ctx)(extendCommand(r))
}

func (s *Server) Get(ctx context.Context, r *gridpb.GetRequest) (*gridpb.OpResult, error) {
	return s.one(ctx)(getTarget(r))
}

func (s *Server) Forget(ctx context.Context, r *gridpb.ForgetRequest) (*gridpb.OpResult, error) {
	return s.one(ctx)(forgetCommand(r))
}

// one runs a single validated operation.
func (s *Server) one(ctx context.Context) func(target, error) (*gridpb.OpResult, error) {
	return func(t target, err error) (*gridpb.OpResult, error) {
		if err != nil {
			return nil, toStatus(err)
		}
		sh := s.host.For(t.cmd.Digest)
		if t.read {
			res, err := sh.Get(ctx, t.cmd.Digest, t.staleOK)
			if err != nil {
				return nil, toStatus(err)
			}
			return toProto(&res), nil
		}
		res, err := sh.Propose(ctx, []keyspace.Command{t.cmd})
		if err != nil {
			return nil, toStatus(err)
		}
		return toProto(&res[0]), nil
	}
}

// Batch validates every operation and sends the operations of each shard,
// linearizable reads included, as one proposal: they share one log entry and
// apply in batch order. The shards run in parallel; stale reads are answered
// locally afterwards. An invalid operation gets its own error result; the
// others still run.
func (s *Server) Batch(ctx context.Context, r *gridpb.BatchRequest) (*gridpb.BatchResponse, error) {
	ops := r.GetOps()
	if err := keyspace.ValidateBatchLen(len(ops)); err != nil {
		return nil, toStatus(err)
	}
	s.metrics.batchOps.Observe(float64(len(ops)))
	out := make([]*gridpb.OpResult, len(ops))
	type group struct {
		sh   *shard.Shard
		cmds []keyspace.Command
		idx  []int
	}
	groups := make(map[*shard.Shard]*group)
	var reads []int
	targets := make([]target, len(ops))
	for i, op := range ops {
		t, err := opTarget(op)
		if err != nil {
			out[i] = errResult(err)
			continue
		}
		targets[i] = t
		if t.read && t.staleOK {
			reads = append(reads, i)
			continue
		}
		if t.read {
			// A linearizable read is a read-only command in the shard's
			// proposal, so it sees exactly the batch's earlier writes.
			t.cmd.Op = keyspace.OpGet
		}
		sh := s.host.For(t.cmd.Digest)
		g := groups[sh]
		if g == nil {
			g = &group{sh: sh}
			groups[sh] = g
		}
		g.cmds = append(g.cmds, t.cmd)
		g.idx = append(g.idx, i)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := g.sh.Propose(ctx, g.cmds)
			for j, i := range g.idx {
				if err != nil {
					out[i] = errResult(err)
				} else {
					out[i] = toProto(&res[j])
				}
			}
		}()
	}
	wg.Wait()
	for _, i := range reads {
		t := targets[i]
		res, err := s.host.For(t.cmd.Digest).Get(ctx, t.cmd.Digest, t.staleOK)
		if err != nil {
			out[i] = errResult(err)
		} else {
			out[i] = toProto(&res)
		}
	}
	return &gridpb.BatchResponse{Results: out}, nil
}

func errResult(err error) *gridpb.OpResult {
	return &gridpb.OpResult{Error: &gridpb.OpError{Code: int32(code(err)), Message: err.Error()}}
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
	for _, sh := range s.host.Shards() {
		st := sh.Status()
		resp.Shards = append(resp.Shards, &gridpb.ShardStatus{
			Id:           uint32(st.ID),
			RaftState:    st.RaftState,
			Leader:       st.Leader,
			Keys:         uint64(st.Keys),
			HotBytes:     uint64(st.HotBytes),
			AppliedIndex: st.AppliedIndex,
			CommitIndex:  st.CommitIndex,
			LastIndex:    st.LastIndex,
			StampUnixMs:  st.Stamp,
			Term:         st.Term,
			ColdKeys:     uint64(st.Cold.Keys),
			ColdBytes:    uint64(st.Cold.Bytes),
		})
	}
	return resp, nil
}
