package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/l4xg/grid/bench/internal/report"
	"github.com/l4xg/grid/bench/internal/workload"
)

// legacyResults is a results.json written before the concurrency sweep
// (bench/results/2026-12-05-vm-standalone-1shard, its histograms and
// breakdowns cut): no concurrencies, no rates in its cells.
const legacyResults = "testdata/results-before-sweep.json"

func TestUpgradeResultsBeforeSweep(t *testing.T) {
	js, err := os.ReadFile(legacyResults)
	if err != nil {
		t.Fatal(err)
	}
	var rf resultsFile
	if err := json.Unmarshal(js, &rf); err != nil {
		t.Fatal(err)
	}
	targets := rf.Config.Targets
	// The medians of reserve-unique the run paced its half-peak runs by,
	// as it wrote them.
	peak := map[string]float64{}
	for _, s := range rf.Summaries {
		if s.Workload == workload.ReserveUnique {
			peak[s.Target] = s.OpsPerSec
		}
	}
	upgrade(&rf, targets)
	if rf.Config.Conc != 50 || !slices.Equal(rf.Config.Concs, []int{50}) {
		t.Fatalf("concurrency %d, %v", rf.Config.Conc, rf.Config.Concs)
	}
	halves := 0
	for _, c := range rf.Cells {
		if c.Concurrency != 50 {
			t.Fatalf("cell %s %s round %d at %d callers", c.Workload, c.Target, c.Round, c.Concurrency)
		}
		switch {
		case c.Workload == halfPeak:
			halves++
			if math.Abs(c.Rate-peak[c.Target]/2) > 1e-6 {
				t.Errorf("%s round %d: asked %.1f calls/s, the run asked %.1f", c.Target, c.Round, c.Rate, peak[c.Target]/2)
			}
		case c.Rate != 0:
			t.Errorf("closed-loop cell %s %s with a rate %v", c.Workload, c.Target, c.Rate)
		}
	}
	if halves != 6 {
		t.Fatalf("%d half-peak cells", halves)
	}
	sums := report.Summarize(rf.Cells, reported(rf.Config.Workloads, rf.Cells), targets)
	md := readmeBlock(rf, sums)
	if !strings.Contains(md, "| reserve-unique@half-peak | grid | ") || !strings.Contains(md, "(asked 12621 calls/s)") || strings.Contains(md, "peak ops/s") {
		t.Errorf("block of the legacy results:\n%s", md)
	}

	// --from redraws it: the tables and plots of before, no sweep plot.
	out := t.TempDir()
	if code := rewrite(config{From: legacyResults, Out: out}); code != 0 {
		t.Fatalf("rewrite: exit %d", code)
	}
	for _, f := range []string{"results.json", "table.md", "table.txt", "throughput.png", "latency-reserve-unique.png", "latency-batch.png", "latency-reserve-unique@half-peak.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(out, "sweep-*")); len(m) > 0 {
		t.Errorf("sweep plots of a run without a sweep: %v", m)
	}
}

// With several concurrencies, every timed workload runs at each, targets
// interleaved within each; the half-peak runs are paced by the headline
// concurrency's peak, with its callers. Against the running Redis and
// PostgreSQL.
func TestSweepRounds(t *testing.T) {
	ctx := context.Background()
	cfg, err := parseFlags([]string{"--targets", "redis,postgres", "--duration", "300ms", "--rounds", "1",
		"--concurrency", "2,6", "--no-progress", "--out", t.TempDir(), workload.ReserveUnique, workload.Batch}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := &bencher{cfg: cfg, log: io.Discard, runID: "sw0001"}
	if skipped := b.prepare(ctx); len(skipped) > 0 {
		t.Skipf("targets skipped: %v", skipped)
	}
	defer b.close()
	if !strings.Contains(b.notes["postgres"], "fsync") {
		t.Errorf("postgres note %q", b.notes["postgres"])
	}
	targets := cfg.Targets
	cells := b.rounds(ctx, targets)
	var order []string
	for _, c := range cells {
		if c.Result == nil || c.Result.Ops == 0 {
			t.Fatalf("cell %+v", c)
		}
		order = append(order, c.Workload+"/"+strings.Repeat("x", c.Concurrency)+"/"+c.Target)
	}
	want := []string{"reserve-unique/xx/redis", "reserve-unique/xx/postgres", "reserve-unique/xxxxxx/redis", "reserve-unique/xxxxxx/postgres",
		"batch/xx/redis", "batch/xx/postgres", "batch/xxxxxx/redis", "batch/xxxxxx/postgres"}
	if !slices.Equal(order, want) {
		t.Fatalf("cells %v, want %v", order, want)
	}
	// The headline is the first concurrency (50 is not in the sweep).
	if cfg.Conc != 2 {
		t.Fatalf("headline %d", cfg.Conc)
	}
	half := b.halfPeakRounds(ctx, targets, cells)
	at2, at6 := halfPeakRates(cells, targets, 2), halfPeakRates(cells, targets, 6)
	if len(half) != len(targets) {
		t.Fatalf("%d half-peak cells", len(half))
	}
	for _, c := range half {
		if c.Concurrency != 2 || c.Rate != at2[c.Target] || c.Rate == at6[c.Target] || c.Result == nil {
			t.Errorf("half-peak %s: %d callers at %.0f calls/s, want 2 at %.0f", c.Target, c.Concurrency, c.Rate, at2[c.Target])
		}
	}
	all := append(cells, half...)
	workloads := reported(cfg.Workloads, all)
	sums := report.Summarize(all, workloads, targets)
	rf := resultsFile{Config: cfg, Notes: b.notes, Cells: all}
	md := readmeBlock(rf, sums)
	for _, want := range []string{"peak ops/s (callers)", "Rows at 2 callers (of 2, 6)", "The sweep, every concurrency", "| reserve-unique | 6 | postgres |",
		"postgres: PostgreSQL ", "calls/s"} {
		if !strings.Contains(md, want) {
			t.Errorf("block lacks %q:\n%s", want, md)
		}
	}
	if err := b.write(rf, sums, targets); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"sweep-reserve-unique.png", "sweep-batch.png", "throughput.png"} {
		if st, err := os.Stat(filepath.Join(cfg.Out, f)); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// Every cell's table is gone.
	conn, err := pgx.Connect(ctx, cfg.PostgresDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'bench_bsw0001%'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d tables of the run left (%v)", left, err)
	}
}
