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
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.batchOps)
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
