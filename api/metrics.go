package api

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

type rpcMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	batchOps prometheus.Histogram
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

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
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
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
		}),
		routes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "l4xg_grid_routed_operations_total",
			Help: "Operations on shards this node does not lead, by route: forwarded to the leader or redirected.",
		}, []string{"route"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.batchOps, m.routes)
	}
	return m
}

func (m *rpcMetrics) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	m.latency.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	m.requests.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	return resp, err
}
