package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingFromEnv sets up OpenTelemetry tracing as the standard OTEL_*
// variables say; it is off unless they ask for it: OTEL_TRACES_EXPORTER=otlp,
// or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with no exporter named.
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off. The
// exporter is OTLP over gRPC (the other OTEL_EXPORTER_OTLP_* variables
// configure it), the sampler OTEL_TRACES_SAMPLER's (default: parent-based,
// always on), and the resource service.name=gridnode with the node id and
// version, overridden by OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
// A nil provider means off; shutdown flushes the spans left.
func tracingFromEnv(ctx context.Context, lookup func(string) (string, bool), nodeID string) (trace.TracerProvider, func(context.Context) error, error) {
	get := func(k string) string { v, _ := lookup(k); return v }
	off := func(context.Context) error { return nil }
	if get("OTEL_SDK_DISABLED") == "true" {
		return nil, off, nil
	}
	switch exp := get("OTEL_TRACES_EXPORTER"); exp {
	case "otlp":
	case "none":
		return nil, off, nil
	case "":
		if get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, off, nil
		}
	default:
		return nil, off, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: only otlp (or none) is supported", exp)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := get(k); p != "" && p != "grpc" {
			return nil, off, fmt.Errorf("%s=%s: only grpc is supported", k, p)
		}
	}
	exporter, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, off, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", "gridnode"), attribute.String("service.version", version),
			attribute.String("service.instance.id", nodeID)),
		resource.Environment())
	if err != nil {
		return nil, off, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
