package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/internal/otlpsink"
	"github.com/l4xg/grid/internal/testwait"
)

// TestTracingFromEnv: off unless the OTEL_* variables ask for it; an
// exporter or protocol the node does not have is refused, naming it.
func TestTracingFromEnv(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		on   bool
		fail string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, fail: "OTEL_TRACES_EXPORTER=zipkin"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, fail: "OTEL_EXPORTER_OTLP_PROTOCOL"},
	} {
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		tp, stop, err := tracingFromEnv(context.Background(), lookup, "n1")
		switch {
		case c.fail != "":
			if err == nil || !strings.Contains(err.Error(), c.fail) {
				t.Errorf("%v: %v, want an error naming %s", c.env, err, c.fail)
			}
		case err != nil:
			t.Errorf("%v: %v", c.env, err)
		case (tp != nil) != c.on:
			t.Errorf("%v: tracing on %v, want %v", c.env, tp != nil, c.on)
		}
		if stop != nil {
			_ = stop(context.Background())
		}
	}
}

// TestTracesReachTheCollector: a node started with an OTLP endpoint
// exports a span per RPC to it, continuing the trace of a traced client,
// whose Process call has its own span with the namespace, the outcome and
// the correlation id.
func TestTracesReachTheCollector(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	sink, err := otlpsink.Start(true)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	p, err := gridproc.Start(gridproc.Options{
		Argv:   []string{exe, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "", "--shards", "2"},
		Env:    append(append(os.Environ(), "GRIDNODE_EXEC=1", "OTEL_BSP_SCHEDULE_DELAY=50"), sink.Env()...),
		Stderr: logs,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	a, err := p.WaitReady(context.Background(), 60*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, a.GRPC, client.WithTracerProvider(tp), client.WithStreaming(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pctx := client.ContextWithCorrelationID(ctx, "corr-42")
	if _, err := c.Process(pctx, "traced", "k1", func(context.Context, client.Lease) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	var process sdktrace.ReadOnlySpan
	rpcTraces := map[string]bool{}
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "grid.Process" {
			process = s
		} else {
			rpcTraces[s.SpanContext().TraceID().String()] = true
		}
	}
	if process == nil {
		t.Fatalf("no grid.Process span among %d client spans", len(exp.GetSpans()))
	}
	want := map[attribute.Key]string{"grid.namespace": "traced", "grid.outcome": "completed", "grid.correlation_id": "corr-42"}
	for _, kv := range process.Attributes() {
		if w, ok := want[kv.Key]; ok && kv.Value.AsString() == w {
			delete(want, kv.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("grid.Process span lacks %v: %v", want, process.Attributes())
	}
	testwait.For(t, 20*time.Second, "the node's spans of the client's trace at the collector", func() bool {
		for _, s := range sink.Spans() {
			var id trace.TraceID
			copy(id[:], s.GetTraceId())
			if rpcTraces[id.String()] && strings.Contains(s.GetName(), "Grid/") {
				return true
			}
		}
		return false
	})
}
