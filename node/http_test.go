package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/node"
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
		`l4xg_grid_shard_leader{shard="0"} 1`,
		`l4xg_grid_shard_voters{shard="0"} 1`, // a standalone node: one voter per shard
		`l4xg_grid_data_dir_available_bytes `,
		`l4xg_grid_data_dir_size_bytes `,
		`l4xg_grid_data_dir_fs_size_bytes `,
		`go_goroutines`,
		`l4xg_grid_build_info{commit="`,
		// gRPC's own server metrics, as stock dashboards read them.
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Reserve",grpc_service="l4xg.grid.v1.Grid",grpc_type="unary"} 2`,
		`grpc_server_handled_total{grpc_code="InvalidArgument",grpc_method="Reserve",grpc_service="l4xg.grid.v1.Grid",grpc_type="unary"} 1`,
		`grpc_server_handling_seconds_bucket{grpc_method="Complete"`,
		`grpc_server_started_total{grpc_method="Stream",grpc_service="l4xg.grid.v1.Grid",grpc_type="bidi_stream"} 0`,
		`",go_version="` + runtime.Version() + `",version="`,
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

	code, body := gridtest.HTTPGet(t, base+"/debug/checksums")
	var rep node.ChecksumReport
	if err := json.Unmarshal([]byte(body), &rep); code != http.StatusOK || err != nil {
		t.Fatalf("/debug/checksums: %d %v: %s", code, err, body)
	}
	records := 0
	for _, r := range rep.Replicas {
		records += r.Records
		if r.Records > 0 && (r.Index == 0 || r.Sum == "0000000000000000") {
			t.Errorf("/debug/checksums: shard %d holds %d records at index %d with sum %s", r.Shard, r.Records, r.Index, r.Sum)
		}
	}
	if len(rep.Replicas) == 0 || records != 1 {
		t.Errorf("/debug/checksums: %d replicas holding %d records, want the one completed key: %s", len(rep.Replicas), records, body)
	}
}

// TestClusterMetrics: a cluster node exports what the alert rules of
// deploy/prometheus read: exactly one control leader, every node a voter
// of the control group, the map's replica count and nodes, and each
// shard's voters on its leader.
func TestClusterMetrics(t *testing.T) {
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Replicas: 3, Shards: 2, HTTP: true})
	if err := c.AwaitStable(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	// A scrape of the three nodes is a moment: leaderships move now and
	// then (the control leader spreads them), so the scrape is taken
	// again until it shows a settled cluster, or the wait ends.
	testwait.Until(t, 20*time.Second, func() string {
		leaders, voters := 0, map[string]bool{}
		for i := range 3 {
			_, body := gridtest.HTTPGet(t, "http://"+c.Node(i).HTTPAddr()+"/metrics")
			for _, want := range []string{
				`l4xg_grid_control_voter 1`,
				`l4xg_grid_cluster_replicas 3`,
				`l4xg_grid_cluster_nodes{alive="true",state="active"} 3`,
			} {
				if !strings.Contains(body, want) {
					return fmt.Sprintf("node %d: /metrics lacks %q", i, want)
				}
			}
			if strings.Contains(body, "\nl4xg_grid_control_leader 1") {
				leaders++
			}
			for _, line := range strings.Split(body, "\n") {
				if strings.HasPrefix(line, "l4xg_grid_shard_voters{") {
					if !strings.HasSuffix(line, " 3") {
						return fmt.Sprintf("node %d: %s, want 3 voters", i, line)
					}
					voters[line] = true
				}
			}
		}
		if leaders != 1 || len(voters) != 2 {
			return fmt.Sprintf("%d control leaders, voters of %d shards exported: want 1 and 2", leaders, len(voters))
		}
		return ""
	})
}
