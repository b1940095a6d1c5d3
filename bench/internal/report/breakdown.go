package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Breakdown names the figures of a grid run's stage breakdown
// (workload.Result.Breakdown), in the order a call passes the stages, with
// what each one is. Times are means over the run; "per op" divides by the
// run's operations; node figures are summed over a cluster's nodes.
var Breakdown = []struct{ Name, Meaning string }{
	{"call_mean_ms", "a call as the benchmark's callers saw it, mean"},
	{"client_queue_ms", "client: a call queued until a batch (stream frame) took it"},
	{"client_answer_ms", "client: from the batch taking it until answered (network and node)"},
	{"client_cpu_us_per_op", "CPU of the benchmark process (callers and client) per op"},
	{"node_cpu_us_per_op", "CPU of the grid's nodes per op"},
	{"ops_per_stream_frame", "operations per Stream request frame (the client's batching)"},
	{"answers_per_stream_frame", "answers per Stream response frame (answers ready together share a write)"},
	{"api_stream_serve_ms", "node: a stream frame's arrival until one of its shard parts is applied"},
	{"api_stream_write_ms", "node: that part's answers handed to the stream's writer until sent"},
	{"propose_queue_ms", "leader: a request waiting for its entry to be handed to Raft (per request)"},
	{"raft_dispatch_ms", "leader: raft.Apply until the leader appended the entry"},
	{"raft_commit_ms", "leader: append until the FSM begins: log write, replication, commit"},
	{"replication_rtt_ms", "leader: an AppendEntries with entries until the follower answered (network, follower's log write)"},
	{"fsm_apply_ms", "leader: the FSM applying the entry's batch"},
	{"answer_ms", "leader: the FSM's end until the callers are answered"},
	{"commands_per_entry", "commands per Raft entry (group commit)"},
	{"log_writes_per_s", "Raft log writes per second, every node"},
	{"log_write_ms", "a Raft log write until synced"},
	{"entries_per_log_write", "entries per Raft log write"},
	{"fsyncs_per_s", "fsyncs of the Raft log per second"},
	{"fsync_ms", "one fsync"},
	{"log_writes_per_fsync", "log writes (any shard) sharing one fsync"},
	{"ops_per_fsync", "the run's operations per fsync, every node"},
}

// A figure may also be given per part, named FIGURE:PART (per follower,
// replication_rtt_ms:node-2); its rows follow the fixed ones, sorted.

// figures are the breakdown's rows for sums: those of Breakdown, then the
// per-part figures the summaries hold, each meaning its figure's meaning
// for its part.
func figures(sums []Summary) []struct{ Name, Meaning string } {
	out := slices.Clone(Breakdown)
	meaning := map[string]string{}
	for _, f := range Breakdown {
		meaning[f.Name] = f.Meaning
	}
	parts := map[string]bool{}
	for _, s := range sums {
		for name := range s.Breakdown {
			if base, _, ok := strings.Cut(name, ":"); ok && meaning[base] != "" {
				parts[name] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		base, part, _ := strings.Cut(name, ":")
		out = append(out, struct{ Name, Meaning string }{name, meaning[base] + ", for " + part})
	}
	return out
}

// hasBreakdown reports whether any summary has a breakdown.
func hasBreakdown(sums []Summary) bool {
	for _, s := range sums {
		if len(s.Breakdown) > 0 {
			return true
		}
	}
	return false
}

// breakdownRows is the breakdown table: a header of the workloads with a
// breakdown (in a sweep, with their callers), then a row per figure.
func breakdownRows(sums []Summary) (header []string, rows [][]string, meanings []string) {
	var with []Summary
	header = []string{"figure"}
	swept := Swept(sums)
	for _, s := range sums {
		if len(s.Breakdown) > 0 {
			with = append(with, s)
			if swept {
				header = append(header, fmt.Sprintf("%s (%d callers)", s.Workload, s.Concurrency))
			} else {
				header = append(header, s.Workload)
			}
		}
	}
	for _, f := range figures(sums) {
		meanings = append(meanings, f.Meaning)
		row := []string{f.Name}
		for _, s := range with {
			v, ok := s.Breakdown[f.Name]
			if !ok {
				row = append(row, "-")
				continue
			}
			row = append(row, fmt.Sprintf("%.3g", v))
		}
		rows = append(rows, row)
	}
	return header, rows, meanings
}

// writeBreakdown writes the breakdown table of the summaries that have
// one, aligned.
func writeBreakdown(w io.Writer, sums []Summary) error {
	if !hasBreakdown(sums) {
		return nil
	}
	header, rows, _ := breakdownRows(sums)
	fmt.Fprintf(w, "\n== grid stage breakdown (median of rounds) ==\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	return tw.Flush()
}

// MarkdownBreakdown is the breakdown table in Markdown, with what each
// figure is; "" when no summary has a breakdown.
func MarkdownBreakdown(sums []Summary) string {
	if !hasBreakdown(sums) {
		return ""
	}
	header, rows, meanings := breakdownRows(sums)
	header = append(header, "what")
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(header)) + "\n")
	for i, r := range rows {
		b.WriteString("| " + strings.Join(append(r, meanings[i]), " | ") + " |\n")
	}
	return b.String()
}
