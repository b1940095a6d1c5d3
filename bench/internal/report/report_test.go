package report

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/l4xg/grid/bench/internal/stats"
	"github.com/l4xg/grid/bench/internal/workload"
)

func result(ops, p99 float64, errs int64, bpk float64) *workload.Result {
	r := &workload.Result{Result: stats.Result{Ops: 4, OpsPerSec: ops, P50: p99 / 4, P90: p99 / 2, P99: p99, P999: p99 * 2, Errors: errs, DupSuppressed: 1}}
	if bpk > 0 {
		r.Fill = &workload.FillResult{BytesPerKey: bpk, After: workload.Memory{Source: "src"}}
	}
	return r
}

func testCells() []Cell {
	return []Cell{
		{Round: 1, Workload: "fill", Target: "grid", Result: result(100, 1000, 0, 50)},
		{Round: 1, Workload: "fill", Target: "redis", Result: result(300, 500, 1, 200)},
		{Round: 2, Workload: "fill", Target: "grid", Result: result(200, 3000, 2, 70)},
		{Round: 2, Workload: "fill", Target: "redis", Result: result(200, 700, 0, 140)},
		{Round: 3, Workload: "fill", Target: "grid", Result: result(400, 2000, 0, 60)},
		{Round: 3, Workload: "fill", Target: "redis", Error: "boom"},
	}
}

func TestSummarizeMediansTotalsAndSameRoundRatios(t *testing.T) {
	sums := Summarize(testCells(), []string{"fill"}, []string{"grid", "redis", "etcd"})
	if len(sums) != 2 {
		t.Fatalf("%d summaries, want grid and redis only", len(sums))
	}
	g, r := sums[0], sums[1]
	if g.Target != "grid" || g.OpsPerSec != 200 || g.P99 != 2000 || g.Errors != 2 || g.DupSuppressed != 3 || g.BytesPerKey != 60 || !g.HasBytes || g.Rounds != 3 {
		t.Fatalf("grid %+v", g)
	}
	if g.OpsRatio != 1 || g.BytesRatio != 1 {
		t.Fatalf("grid ratio to itself %v %v", g.OpsRatio, g.BytesRatio)
	}
	// Redis: rounds 1 and 2 only. Ops ratios per round 3.0 and 1.0 -> 2.0;
	// bytes ratios 4.0 and 2.0 -> 3.0. Not the ratio of medians (250/200).
	if r.Rounds != 2 || r.FailedRounds != 1 || r.OpsPerSec != 250 || r.OpsRatio != 2 || r.BytesRatio != 3 || r.BytesPerKey != 170 || r.P99 != 600 {
		t.Fatalf("redis %+v", r)
	}
}

func TestTables(t *testing.T) {
	sums := Summarize(testCells(), []string{"fill"}, []string{"grid", "redis"})
	var buf bytes.Buffer
	if err := WriteText(&buf, sums, []string{"fill"}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"== fill ==", "redis (1 rounds failed)", "2.00x", "170.0", "0.60", "3 (25%)"} {
		if !strings.Contains(out, want) {
			t.Errorf("text table lacks %q:\n%s", want, out)
		}
	}
	md := Markdown(sums, 0)
	if lines := strings.Count(md, "\n"); lines != 4 {
		t.Errorf("markdown has %d lines, want header, rule and 2 rows:\n%s", lines, md)
	}
}

func TestReplaceBetween(t *testing.T) {
	doc := "# A\nkeep\n" + BeginMarker + "\nold\n" + EndMarker + "\ntail\n"
	got, err := ReplaceBetween(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# A\nkeep\n" + BeginMarker + "\nnew table\n" + EndMarker + "\ntail\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	for _, bad := range []string{"no markers", EndMarker + BeginMarker, BeginMarker + BeginMarker + EndMarker} {
		if _, err := ReplaceBetween(bad, "x"); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestPlotWritesPNGAndSVG(t *testing.T) {
	dir := t.TempDir()
	sums := Summarize(testCells(), []string{"fill"}, []string{"grid", "redis"})
	files, err := Plot(dir, sums, []string{"fill"}, []string{"grid", "redis"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 {
		t.Fatalf("files %v, want throughput and latency-fill, png and svg", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || len(b) < 100 {
			t.Fatalf("%s: %d bytes, %v", f, len(b), err)
		}
		if strings.HasSuffix(f, ".png") && !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("%s is not a PNG", f)
		}
	}
}

// TestBreakdownPerPart: a figure given per part (per follower) gets a row
// of its own after the fixed ones, meaning its figure's meaning for that
// part; a name that is no figure's part is left out.
func TestBreakdownPerPart(t *testing.T) {
	sums := []Summary{{Workload: "reserve-unique", Target: "grid", Breakdown: map[string]float64{
		"replication_rtt_ms": 2, "replication_rtt_ms:node-3": 3, "replication_rtt_ms:node-2": 1, "bogus:x": 9,
	}}}
	md := MarkdownBreakdown(sums)
	i2, i3 := strings.Index(md, "| replication_rtt_ms:node-2 | 1 |"), strings.Index(md, "| replication_rtt_ms:node-3 | 3 |")
	if i2 < 0 || i3 < i2 || !strings.Contains(md, "| replication_rtt_ms | 2 |") || strings.Contains(md, "bogus") {
		t.Fatalf("breakdown:\n%s", md)
	}
	if !strings.Contains(md[i2:], "(network, follower's log write), for node-2 |") {
		t.Errorf("the per-follower row does not say what it is:\n%s", md)
	}
	var b bytes.Buffer
	if err := writeBreakdown(&b, sums); err != nil || !strings.Contains(b.String(), "replication_rtt_ms:node-3") {
		t.Errorf("text breakdown (%v):\n%s", err, b.String())
	}
}
