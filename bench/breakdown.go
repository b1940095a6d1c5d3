package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/l4xg/grid/bench/internal/target"
	"github.com/l4xg/grid/bench/internal/workload"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/proccpu"
)

// withBreakdown runs f, a workload against the grid t, and adds to its
// result the stage breakdown of the run (report.Breakdown): the
// grid's counters, summed over its nodes, read before and after, and the
// CPU time of this process, the client's side. A breakdown that cannot be
// read is left out with a message; the run's figures stand.
func (b *bencher) withBreakdown(ctx context.Context, t *target.Grid, f func() (workload.Result, error)) (workload.Result, error) {
	before, err := t.Counters(ctx)
	cpu0, client0 := processCPU(), t.ClientStats()
	res, rerr := f()
	if rerr != nil {
		return res, rerr
	}
	var after map[string]float64
	if err == nil {
		after, err = t.Counters(ctx)
	}
	if err != nil {
		fmt.Fprintf(b.log, "\nbench: grid: no stage breakdown: %v\n", err)
		return res, nil
	}
	res.Breakdown = breakdown(before, after, res, processCPU()-cpu0)
	addClient(res.Breakdown, client0, t.ClientStats())
	return res, nil
}

// addClient adds the client's queue and answer figures of a run to bd,
// from its Stats before and after.
func addClient(bd map[string]float64, before, after client.Stats) {
	calls := float64(after.Calls - before.Calls)
	if calls == 0 {
		return // unary calls only (batch, fill)
	}
	bd["client_queue_ms"] = (after.QueueWait - before.QueueWait).Seconds() * 1e3 / calls
	bd["client_answer_ms"] = (after.Answer - before.Answer).Seconds() * 1e3 / calls
}

// breakdown derives the figures of report.Breakdown from the
// grid's counters before and after a run with result res, and the CPU
// time clientCPU of the benchmark process meanwhile. A figure whose
// counters did not move is left out.
func breakdown(before, after map[string]float64, res workload.Result, clientCPU time.Duration) map[string]float64 {
	d := func(name string) float64 { return after[name] - before[name] }
	out := map[string]float64{}
	set := func(name string, num, den float64) {
		if den > 0 {
			out[name] = num / den
		}
	}
	ops, secs := float64(res.Ops), res.ElapsedSec
	set("node_cpu_us_per_op", 1e6*d("process_cpu_seconds_total"), ops)
	set("client_cpu_us_per_op", 1e6*clientCPU.Seconds(), ops)
	out["call_mean_ms"] = res.Mean / 1000
	for _, st := range []struct{ figure, metric, stage string }{
		{"api_stream_serve_ms", "l4xg_grid_api_stage_seconds", "stream_serve"},
		{"api_stream_write_ms", "l4xg_grid_api_stage_seconds", "stream_write"},
		{"propose_queue_ms", "l4xg_grid_stage_seconds", "propose_queue"},
		{"raft_dispatch_ms", "l4xg_grid_stage_seconds", "raft_dispatch"},
		{"raft_commit_ms", "l4xg_grid_stage_seconds", "raft_commit"},
		{"fsm_apply_ms", "l4xg_grid_stage_seconds", "fsm_apply"},
		{"answer_ms", "l4xg_grid_stage_seconds", "answer"},
	} {
		label := fmt.Sprintf("{stage=%q}", st.stage)
		set(st.figure, 1e3*d(st.metric+"_sum"+label), d(st.metric+"_count"+label))
	}
	set("ops_per_stream_frame", d("l4xg_grid_stream_request_operations_sum"), d("l4xg_grid_stream_request_operations_count"))
	set("answers_per_stream_frame", d("l4xg_grid_stream_response_operations_sum"), d("l4xg_grid_stream_response_operations_count"))
	set("commands_per_entry", d("l4xg_grid_raft_entry_commands_sum"), d("l4xg_grid_raft_entry_commands_count"))
	writes, fsyncs := d("l4xg_grid_raft_log_writes_total"), d("l4xg_grid_raft_log_fsyncs_total")
	set("log_writes_per_s", writes, secs)
	set("log_write_ms", 1e3*d("l4xg_grid_raft_log_write_seconds_total"), writes)
	set("entries_per_log_write", d("l4xg_grid_raft_log_entries_written_total"), writes)
	set("fsyncs_per_s", fsyncs, secs)
	set("fsync_ms", 1e3*d("l4xg_grid_raft_log_fsync_seconds_total"), fsyncs)
	set("log_writes_per_fsync", writes, fsyncs)
	set("ops_per_fsync", ops, fsyncs)
	// Per node of a cluster: do the writes of different shards, the
	// followers' among them, share a node's syncs?
	for key := range after {
		node, ok := strings.CutPrefix(key, "l4xg_grid_raft_log_fsyncs_total@")
		if !ok {
			continue
		}
		w, f := d("l4xg_grid_raft_log_writes_total@"+node), d(key)
		set("fsyncs_per_s:"+node, f, secs)
		set("log_writes_per_fsync:"+node, w, f)
	}
	// Replication round trips, over every follower and by follower.
	const rtt = "l4xg_grid_raft_replication_seconds"
	var sum, count float64
	for key := range after {
		peer, ok := strings.CutPrefix(key, rtt+`_count{peer="`)
		if !ok {
			continue
		}
		label := key[len(rtt+"_count"):]
		s, n := d(rtt+"_sum"+label), d(key)
		sum, count = sum+s, count+n
		set("replication_rtt_ms:"+strings.TrimSuffix(peer, `"}`), 1e3*s, n)
	}
	set("replication_rtt_ms", 1e3*sum, count)
	return out
}

// processCPU is the user and system CPU time of this process so far (0
// where it cannot be read).
func processCPU() time.Duration {
	d, _ := proccpu.Used()
	return d
}
