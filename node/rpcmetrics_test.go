package node_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// TestInternalCallsLeaveClientMetrics: the calls the grid makes itself
// (the nodes' Status polls and placement moves, a tool's status and audit)
// do not count as client RPCs. On every node of a cluster that no client
// but the test calls, grpc_server_handled_total and
// l4xg_grid_rpc_requests_total count the test's one Status call and
// nothing else, grpc_server_started_total no tool's Audit stream, while
// l4xg_grid_internal_rpc_requests_total counts the nodes' polls and the
// tool's calls. Before, an idle cluster counted about ten Status calls a
// second as client calls.
func TestInternalCallsLeaveClientMetrics(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Replicas: 3, Shards: 2, HTTP: true})
	if err := c.AwaitStable(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	scrape := func(i int) string {
		_, body := gridtest.HTTPGet(t, "http://"+c.Node(i).HTTPAddr()+"/metrics")
		return body
	}
	toolCalls := func(body, method string) float64 {
		return sumSamples(body, "l4xg_grid_internal_rpc_requests_total", `caller="tool"`, `method="/l4xg.grid.v1.Grid/`+method+`"`, `code="OK"`)
	}
	// gridtest's own Status calls (AwaitStable) are a tool's too.
	before := scrape(0)

	ctx := gridtest.Context(t)
	// A client's Status, and a tool's Status and Audit, on node 0.
	if _, err := gridtest.Dial(t, c.Node(0).Addr()).Status(ctx, &gridpb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.Node(0).Addr(), append(gridpb.WithCaller(gridpb.CallerTool), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tool := gridpb.NewGridClient(conn)
	if _, err := tool.Status(ctx, &gridpb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := drainAudit(ctx, tool); err != nil {
		t.Fatal(err)
	}

	// clientOnly says how node i's client RPC metrics count more than
	// the test's one client call, "" when they do not.
	clientOnly := func(i int, body string) string {
		want := 0.0
		if i == 0 {
			want = 1 // the test's client Status
		}
		var why []string
		for _, name := range []string{"grpc_server_handled_total", "grpc_server_started_total", "l4xg_grid_rpc_requests_total", "l4xg_grid_rpc_duration_seconds_count"} {
			if got := sumSamples(body, name); got != want {
				why = append(why, fmt.Sprintf("node %d: %s sums to %v, want %v (client calls only):\n%s", i, name, got, want, nonZero(samples(body, name))))
			}
		}
		return strings.Join(why, "\n")
	}
	// The nodes poll each other's Status while they check their replicas
	// (cluster.Runtime.Ready), and did while the cluster formed. Until
	// the polls show in the internal metric, and once more after, the
	// client metrics count the test's client call alone.
	testwait.Until(t, 30*time.Second, func() string {
		polls := 0.0
		for i := range 3 {
			body := scrape(i)
			if why := clientOnly(i, body); why != "" {
				t.Fatal(why)
			}
			polls += sumSamples(body, "l4xg_grid_internal_rpc_requests_total", `caller="node"`, `method="/l4xg.grid.v1.Grid/Status"`)
		}
		if polls == 0 {
			return "no node's Status poll of another counted in l4xg_grid_internal_rpc_requests_total"
		}
		return ""
	})
	for i := range 3 {
		if why := clientOnly(i, scrape(i)); why != "" {
			t.Error(why)
		}
	}
	after := scrape(0)
	for _, method := range []string{"Status", "Audit"} {
		if got := toolCalls(after, method) - toolCalls(before, method); got != 1 {
			t.Errorf("node 0: %v more tool %s calls in l4xg_grid_internal_rpc_requests_total, want 1:\n%s", got, method, samples(after, "l4xg_grid_internal_rpc_requests_total"))
		}
	}
}

// drainAudit runs an Audit stream to its end.
func drainAudit(ctx context.Context, g gridpb.GridClient) error {
	s, err := g.Audit(ctx, &gridpb.AuditRequest{Namespace: []byte("m")})
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
	}
}

// sumSamples sums the samples of the metric name in a /metrics body whose
// labels include every one of labels (each `key="value"`).
func sumSamples(body, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(samples(body, name), "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		matched := true
		for _, l := range labels {
			matched = matched && strings.Contains(series, l)
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil && matched {
			sum += v
		}
	}
	return sum
}

// nonZero are the lines of samples whose value is not 0.
func nonZero(samples string) string {
	var out []string
	for _, line := range strings.Split(samples, "\n") {
		if !strings.HasSuffix(line, " 0") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// samples are the lines of the metric name in a /metrics body.
func samples(body, name string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
