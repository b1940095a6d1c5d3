package node_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestHTTPEndpoints: health, readiness and the Prometheus metrics reflect
// what the node did.
func TestHTTPEndpoints(t *testing.T) {
	n := gridtest.Start(t, gridtest.Options{HTTP: true})
	base := "http://" + n.HTTPAddr()
	if code, _ := gridtest.HTTPGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if code, _ := gridtest.HTTPGet(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz of a serving node: %d", code)
	}
	c := gridtest.Dial(t, n.Addr())
	res, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("m"), Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("m"), Key: []byte("k"), Token: res.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("m"), Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("m"), Key: nil})
	_, body := gridtest.HTTPGet(t, base+"/metrics")
	for _, want := range []string{
		`l4xg_grid_outcomes_total{op="reserve",outcome="ACQUIRED"} 1`,
		`l4xg_grid_outcomes_total{op="reserve",outcome="DUPLICATE"} 1`,
		`l4xg_grid_outcomes_total{op="complete",outcome="OK"} 1`,
		`l4xg_grid_duplicates_suppressed_total 1`,
		`l4xg_grid_rpc_requests_total{code="InvalidArgument",method="/l4xg.grid.v1.Grid/Reserve"} 1`,
		`l4xg_grid_raft_apply_latency_seconds_count`,
		`l4xg_grid_raft_entry_commands_bucket`,
		`l4xg_grid_tier_bytes{shard="0",tier="hot"}`,
		`l4xg_grid_shard_leader{shard="7"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	var held bool
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, `l4xg_grid_keys{`) && strings.Contains(line, `state="completed"`) && strings.HasSuffix(line, " 1") {
			held = true
		}
	}
	if !held {
		t.Error("/metrics: no shard reports the completed key")
	}
}
