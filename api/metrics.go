package api

import (
	"context"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
)

// rpcMetrics are the node's RPC metrics. The client RPC metrics (grpc,
// requests, latency) count the calls of clients only; the calls the
// grid makes itself, which name their caller (gridpb.MetadataCaller: the
// other nodes' status polls, placement moves and forwards, the tools'
// polls), go to internal instead. Without that, an idle cluster showed
// ten Status calls a second in grpc_server_handled_total, and a starting
// one Unavailable ClusterMap answers in the client error rate.
type rpcMetrics struct {
	// grpc are the gRPC server metrics under the names stock dashboards
	// read (grpc_server_started_total, grpc_server_handled_total,
	// grpc_server_handling_seconds, grpc_server_msg_received_total,
	// grpc_server_msg_sent_total), next to the grid's own; grpcUnary and
	// grpcStream are its interceptors.
	grpc       *grpcprom.ServerMetrics
	grpcUnary  grpc.UnaryServerInterceptor
	grpcStream grpc.StreamServerInterceptor
	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	// internal counts the calls that name their caller, by caller, method
	// and status code.
	internal *prometheus.CounterVec
	batchOps prometheus.Histogram
	// streamOps is the operations per Stream request frame, streamAnswers
	// the answers per response frame: how many answers ready together
	// shared a write.
	streamOps, streamAnswers prometheus.Histogram
	// planned counts operations validated, digested and grouped by
	// shard: once each on every node an operation reaches.
	planned prometheus.Counter
	// stages times the node's part of a Stream's operations, by stage:
	// stageStreamServe, stageStreamWrite.
	stages *prometheus.HistogramVec
	// routes counts operations a cluster node did not run itself, by how
	// it answered them: forwarded to the shard's leader, or redirected.
	routes *prometheus.CounterVec
}

// Routes of an operation this node does not serve itself.
const (
	routeForwarded  = "forwarded"
	routeRedirected = "redirected"
)

func (m *rpcMetrics) routed(route string, ops int) {
	m.routes.WithLabelValues(route).Add(float64(ops))
}

// The stages of rpcMetrics.stages.
const (
	// stageStreamServe: from a frame's arrival until one of its shard
	// parts is applied (routing, the shard's proposer and Raft: shard's
	// l4xg_grid_stage_seconds splits that), per part.
	stageStreamServe = "stream_serve"
	// stageStreamWrite: from an answer's hand-off to the stream's writer
	// until the frame carrying it is sent, per part.
	stageStreamWrite = "stream_write"
)

func (m *rpcMetrics) stage(name string, d time.Duration) {
	m.stages.WithLabelValues(name).Observe(d.Seconds())
}

// opBuckets are the buckets of the operations-per-frame histograms.
func opBuckets() []float64 { return []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} }

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "l4xg_grid_rpc_requests_total",
			Help: "gRPC requests by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "l4xg_grid_rpc_duration_seconds",
			Help:    "gRPC request latency by method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"method"}),
		batchOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "l4xg_grid_batch_operations",
			Help:    "Operations per Batch request.",
			Buckets: opBuckets(),
		}),
		streamOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "l4xg_grid_stream_request_operations",
			Help:    "Operations per Stream request frame.",
			Buckets: opBuckets(),
		}),
		streamAnswers: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "l4xg_grid_stream_response_operations",
			Help:    "Answers per Stream response frame: the answers ready together that shared one write.",
			Buckets: opBuckets(),
		}),
		planned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "l4xg_grid_operations_planned_total",
			Help: "Operations validated, digested and grouped by shard: once each on every node they reach (a forwarded operation counts on both).",
		}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "l4xg_grid_api_stage_seconds",
			Help:    "Time of Stream operations in the node's API, by stage: stream_serve (a frame's arrival until one of its shard parts is applied), stream_write (that part's answers handed to the writer until sent).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16),
		}, []string{"stage"}),
		routes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "l4xg_grid_routed_operations_total",
			Help: "Operations on shards this node does not lead, by route: forwarded to the leader or redirected.",
		}, []string{"route"}),
		internal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "l4xg_grid_internal_rpc_requests_total",
			Help: "gRPC calls the grid makes itself, by caller (node: another node's status polls, placement moves and forwards; tool: gridnode status and the like), method and status code. The client RPC metrics (grpc_server_*, l4xg_grid_rpc_*) leave them out.",
		}, []string{"caller", "method", "code"}),
	}
	m.grpcUnary, m.grpcStream = m.grpc.UnaryServerInterceptor(), m.grpc.StreamServerInterceptor()
	if reg != nil {
		reg.MustRegister(m.grpc, m.requests, m.latency, m.batchOps, m.streamOps, m.streamAnswers, m.planned, m.stages, m.routes, m.internal)
	}
	return m
}

// unary counts a unary call: in the client RPC metrics, or in internal
// when it names its caller.
func (m *rpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if caller := gridpb.CallerOf(ctx); caller != "" {
		resp, err := h(ctx, req)
		m.internal.WithLabelValues(caller, info.FullMethod, status.Code(err).String()).Inc()
		return resp, err
	}
	return m.grpcUnary(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		m.latency.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
		return resp, err
	})
}

// stream counts a streaming call as unary does.
func (m *rpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if caller := gridpb.CallerOf(ss.Context()); caller != "" {
		err := h(srv, ss)
		m.internal.WithLabelValues(caller, info.FullMethod, status.Code(err).String()).Inc()
		return err
	}
	return m.grpcStream(srv, ss, info, h)
}
