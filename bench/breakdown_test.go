package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/bench/internal/report"
	"github.com/l4xg/grid/bench/internal/stats"
	"github.com/l4xg/grid/bench/internal/workload"
	"github.com/l4xg/grid/client"
)

// The breakdown divides each counter's change over the run by what it is
// per: operations, observations, seconds, writes or fsyncs; a stage that
// saw no observation is left out rather than shown as zero.
func TestBreakdownFromCounters(t *testing.T) {
	before := map[string]float64{
		"process_cpu_seconds_total":                               10,
		`l4xg_grid_stage_seconds_sum{stage="raft_commit"}`:        1,
		`l4xg_grid_stage_seconds_count{stage="raft_commit"}`:      100,
		"l4xg_grid_raft_log_writes_total":                         50,
		"l4xg_grid_raft_log_fsyncs_total":                         40,
		"l4xg_grid_raft_log_fsync_seconds_total":                  0.5,
		"l4xg_grid_raft_entry_commands_sum":                       400,
		"l4xg_grid_raft_entry_commands_count":                     100,
		`l4xg_grid_api_stage_seconds_count{stage="stream_serve"}`: 7,
		"l4xg_grid_stream_request_operations_sum":                 100,
		"l4xg_grid_stream_request_operations_count":               50,
		"l4xg_grid_stream_response_operations_sum":                100,
		"l4xg_grid_stream_response_operations_count":              90,
		"l4xg_grid_raft_log_writes_total@node-2":                  20,
		"l4xg_grid_raft_log_fsyncs_total@node-2":                  10,
	}
	after := map[string]float64{
		"process_cpu_seconds_total":                               12,
		`l4xg_grid_stage_seconds_sum{stage="raft_commit"}`:        3,
		`l4xg_grid_stage_seconds_count{stage="raft_commit"}`:      1100,
		"l4xg_grid_raft_log_writes_total":                         2050,
		"l4xg_grid_raft_log_fsyncs_total":                         1040,
		"l4xg_grid_raft_log_fsync_seconds_total":                  1.5,
		"l4xg_grid_raft_entry_commands_sum":                       4400,
		"l4xg_grid_raft_entry_commands_count":                     1100,
		`l4xg_grid_api_stage_seconds_count{stage="stream_serve"}`: 7,
		"l4xg_grid_stream_request_operations_sum":                 4100,
		"l4xg_grid_stream_request_operations_count":               1050,
		"l4xg_grid_stream_response_operations_sum":                4100,
		"l4xg_grid_stream_response_operations_count":              590,
		"l4xg_grid_raft_log_writes_total@node-2":                  620,
		"l4xg_grid_raft_log_fsyncs_total@node-2":                  210,
	}
	res := workload.Result{Result: stats.Result{Ops: 4000, ElapsedSec: 2, Mean: 2500}}
	got := breakdown(before, after, res, 400*time.Millisecond)
	want := map[string]float64{
		"node_cpu_us_per_op":          500, // 2 s over 4000 ops
		"client_cpu_us_per_op":        100,
		"call_mean_ms":                2.5,
		"raft_commit_ms":              2, // 2 s over 1000 entries
		"commands_per_entry":          4,
		"ops_per_stream_frame":        4, // 4000 operations in 1000 frames
		"answers_per_stream_frame":    8, // 4000 answers in 500 frames
		"log_writes_per_s":            1000,
		"fsyncs_per_s":                500,
		"fsync_ms":                    1,
		"log_writes_per_fsync":        2,
		"ops_per_fsync":               4,
		"fsyncs_per_s:node-2":         100, // 200 fsyncs over 2 s
		"log_writes_per_fsync:node-2": 3,
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for _, absent := range []string{"api_stream_serve_ms", "propose_queue_ms"} {
		if v, ok := got[absent]; ok {
			t.Errorf("%s = %v, want it left out (no observations)", absent, v)
		}
	}
	for k := range got {
		known := false
		base, _, _ := strings.Cut(k, ":") // a figure of one part: its figure's row
		for _, f := range report.Breakdown {
			known = known || f.Name == base
		}
		if !known {
			t.Errorf("figure %s is not in report.Breakdown, so no table shows it", k)
		}
	}
	md := report.MarkdownBreakdown(report.Summarize([]report.Cell{{Round: 1, Workload: "reserve-unique", Target: "grid", Result: &workload.Result{Breakdown: got}}},
		[]string{"reserve-unique"}, []string{"grid"}))
	if !strings.Contains(md, "| raft_commit_ms | 2 |") || !strings.Contains(md, "| propose_queue_ms | - |") {
		t.Fatalf("breakdown table:\n%s", md)
	}
}

// The client's figures are per batched call; a run of unary calls only
// (batch, fill) has none.
func TestBreakdownClientFigures(t *testing.T) {
	bd := map[string]float64{}
	addClient(bd, client.Stats{Calls: 10, QueueWait: time.Second}, client.Stats{Calls: 110, QueueWait: time.Second + 50*time.Millisecond, Answer: 300 * time.Millisecond})
	if bd["client_queue_ms"] != 0.5 || bd["client_answer_ms"] != 3 {
		t.Fatalf("client figures %v, want queue 0.5 ms and answer 3 ms per call", bd)
	}
	bd = map[string]float64{}
	addClient(bd, client.Stats{Calls: 7}, client.Stats{Calls: 7})
	if len(bd) != 0 {
		t.Fatalf("figures of a run without batched calls: %v", bd)
	}
}
