// Package otlpsink is an OTLP trace receiver for tests and the benchmark:
// a gRPC server of the collector's TraceService that keeps the spans it is
// sent, so that a gridnode started with OTEL_EXPORTER_OTLP_ENDPOINT pointing
// at it exports for real, over the network, as to a collector.
package otlpsink

import (
	"context"
	"net"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Sink receives spans on Addr until Close. Keep false counts them only.
type Sink struct {
	coltracepb.UnimplementedTraceServiceServer
	srv  *grpc.Server
	ln   net.Listener
	keep bool

	mu    sync.Mutex
	spans []*tracepb.Span
	count int
}

// Start listens on a free loopback port.
func Start(keep bool) (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{srv: grpc.NewServer(), ln: ln, keep: keep}
	coltracepb.RegisterTraceServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the sink's address (host:port).
func (s *Sink) Addr() string { return s.ln.Addr().String() }

// Env are the variables that make a gridnode export its traces here.
func (s *Sink) Env() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + s.Addr(), "OTEL_EXPORTER_OTLP_INSECURE=true"}
}

// Export implements the collector's TraceService.
func (s *Sink) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.count += len(ss.GetSpans())
			if s.keep {
				s.spans = append(s.spans, ss.GetSpans()...)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans are the spans kept so far.
func (s *Sink) Spans() []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*tracepb.Span(nil), s.spans...)
}

// Count is the number of spans received so far.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Close stops the server.
func (s *Sink) Close() { s.srv.Stop() }
