package target

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/l4xg/grid/bench/internal/workload"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
)

func res2(key string) workload.Reservation { return workload.Reservation{Key: key, Token: 12345} }

func TestGridContract(t *testing.T) {
	n := gridtest.Start(t, gridtest.Options{HTTP: true, Shards: 2})
	ctx := context.Background()
	g, err := NewGrid(ctx, n.Addr(), Proc{HTTPAddr: n.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	prefix := testPrefix()
	contract(t, g, prefix)

	// The records are what the operations claim: completed, and held.
	c, err := client.Dial(ctx, n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for key, want := range map[string]client.State{prefix + "k1": client.StateCompleted, prefix + "b1": client.StateProcessing} {
		r, err := c.Get(ctx, Namespace, key)
		if err != nil || r.State != want {
			t.Fatalf("%s: %v, %v: want %v", key, r.State, err, want)
		}
	}
	m, err := g.Memory(ctx)
	if err != nil || !strings.Contains(m.Source, "process_resident_memory_bytes") || m.Extra["go_heap_inuse_bytes"] <= 0 {
		t.Fatalf("memory from /metrics: %+v, %v", m, err)
	}
}

func TestGridCompleteWithWrongTokenIsLeaseLost(t *testing.T) {
	n := gridtest.Start(t, gridtest.Options{Shards: 1})
	ctx := context.Background()
	g, err := NewGrid(ctx, n.Addr(), Proc{PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	r, err := g.Reserve(ctx, "k", testLease)
	if err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	r.Token++
	if err := g.Complete(ctx, r, testRetention); err == nil {
		t.Fatal("complete with a superseded token succeeded")
	}
	m, err := g.Memory(ctx) // of this process, by pid
	if err != nil || !strings.Contains(m.Source, "VmRSS") || m.Bytes < 1<<20 {
		t.Fatalf("memory by pid: %+v, %v", m, err)
	}
}

func TestParseMetrics(t *testing.T) {
	text := "# HELP x\nprocess_resident_memory_bytes 1.2345e+07\ngo_memstats_heap_inuse_bytes 4096\nfoo{a=\"b\"} 1\n"
	m, err := ParseMetrics(bufio.NewScanner(strings.NewReader(text)), "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes")
	if err != nil || m["process_resident_memory_bytes"] != 12345000 || m["go_memstats_heap_inuse_bytes"] != 4096 {
		t.Fatalf("%v, %v", m, err)
	}
	if _, err := ParseMetrics(bufio.NewScanner(strings.NewReader(text)), "missing"); err == nil {
		t.Fatal("missing metric not reported")
	}
}

// A cluster's memory figure is the sum over its nodes, each node counted by
// its own process (or its own /metrics).
func TestGridMemorySumsNodes(t *testing.T) {
	ctx := context.Background()
	node := func(rss, heap int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "process_resident_memory_bytes %d\ngo_memstats_heap_inuse_bytes %d\n", rss, heap)
		}))
	}
	a, b := node(1000, 10), node(3000, 30)
	defer a.Close()
	defer b.Close()
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	g := &Grid{procs: []Proc{{HTTPAddr: host(a)}, {HTTPAddr: host(b)}}, http: http.DefaultClient}
	m, err := g.Memory(ctx)
	if err != nil || m.Bytes != 4000 || m.Extra["go_heap_inuse_bytes"] != 40 || !strings.HasPrefix(m.Source, "sum over 2 nodes of /metrics") {
		t.Fatalf("by /metrics: %+v, %v", m, err)
	}
	one, err := VmRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	g.procs = []Proc{{PID: os.Getpid(), HTTPAddr: host(a)}, {PID: os.Getpid(), HTTPAddr: host(b)}}
	m, err = g.Memory(ctx)
	// VmRSS, not the /metrics figure, once every node is a child; the
	// process grows a little between the reads.
	if err != nil || m.Bytes < 2*one || m.Bytes > 2*one+8<<20 || m.Extra["go_heap_inuse_bytes"] != 40 || !strings.Contains(m.Source, "VmRSS") {
		t.Fatalf("by pid: %+v, %v (one: %d)", m, err, one)
	}
	g.procs = []Proc{{PID: os.Getpid()}, {HTTPAddr: host(a)}}
	if _, err := g.Memory(ctx); err == nil {
		t.Fatal("a figure from a node with a pid and one with /metrics only")
	}
	g.procs = nil
	if _, err := g.Memory(ctx); err == nil {
		t.Fatal("a figure without nodes")
	}
}

// addSamples keeps the grid's samples and the process CPU, labels and all,
// and adds them up across calls (a cluster's nodes).
func TestAddSamples(t *testing.T) {
	page := `# HELP l4xg_grid_stage_seconds Time.
# TYPE l4xg_grid_stage_seconds histogram
l4xg_grid_stage_seconds_sum{stage="answer"} 0.25
l4xg_grid_stage_seconds_count{stage="answer"} 10
go_goroutines 40
process_cpu_seconds_total 1.5
process_cpu_seconds_total_other 9
`
	sums := map[string]float64{}
	for range 2 {
		if err := addSamples(sums, bufio.NewScanner(strings.NewReader(page))); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{
		`l4xg_grid_stage_seconds_sum{stage="answer"}`:   0.5,
		`l4xg_grid_stage_seconds_count{stage="answer"}`: 20,
		"process_cpu_seconds_total":                     3,
	}
	if len(sums) != len(want) {
		t.Fatalf("samples %v, want %v", sums, want)
	}
	for k, v := range want {
		if sums[k] != v {
			t.Fatalf("%s = %v, want %v", k, sums[k], v)
		}
	}
	if err := addSamples(sums, bufio.NewScanner(strings.NewReader("l4xg_grid_x{a=\"b\"} notanumber\n"))); err == nil {
		t.Fatal("a sample that is not a number was read")
	}
}
