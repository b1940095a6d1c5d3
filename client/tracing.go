package client

import (
	"context"
	"errors"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// tracerName names the client's spans' instrumentation scope.
const tracerName = "github.com/l4xg/grid/client"

// WithTracerProvider traces the client with OpenTelemetry: a span for each
// gRPC call it makes (otelgrpc; a call carries a batch of operations, or is
// the long-lived stream), with the W3C trace context propagated to the
// grid, and a span "grid.Process" for each Process call, with the
// namespace, the outcome and the correlation id (ContextWithCorrelationID).
// Without it the client makes no span.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		c.tracer = tp.Tracer(tracerName)
		c.dialOpts = append(c.dialOpts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(propagation.TraceContext{}))))
	}
}

// Attributes of a Process span.
const (
	attrNamespace     = "grid.namespace"
	attrOutcome       = "grid.outcome"
	attrCorrelationID = "grid.correlation_id"
	attrAttempt       = "grid.attempt"
)

// traceProcess starts the span of a Process call, or returns ctx and a
// no-op end when the client is not traced. end records what became of the
// call.
func (c *Client) traceProcess(ctx context.Context, ns string) (context.Context, func(Processed, error)) {
	if c.cfg.tracer == nil {
		return ctx, func(Processed, error) {}
	}
	attrs := []attribute.KeyValue{attribute.String(attrNamespace, ns)}
	if id := CorrelationID(ctx); id != "" {
		attrs = append(attrs, attribute.String(attrCorrelationID, id))
	}
	ctx, span := c.cfg.tracer.Start(ctx, "grid.Process", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, func(p Processed, err error) {
		span.SetAttributes(attribute.String(attrOutcome, processOutcome(p, err)))
		if p.Attempt > 0 {
			span.SetAttributes(attribute.Int(attrAttempt, p.Attempt))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// processOutcome names what became of a Process call.
func processOutcome(p Processed, err error) string {
	var busy *BusyError
	switch {
	case err == nil && p.Duplicate:
		return "duplicate"
	case err == nil:
		return "completed"
	case errors.As(err, &busy):
		return "busy"
	case errors.Is(err, ErrPoisoned):
		return "poisoned"
	case errors.Is(err, ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, ErrLeaseExpired):
		return "lease_expired"
	case p.RetryAfter > 0 || p.Token != 0:
		return "handler_failed"
	default:
		return "error"
	}
}
