package report

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/l4xg/grid/bench/internal/stats"
	"github.com/l4xg/grid/bench/internal/workload"
)

// sweepCells: reserve-unique at 10 and 50 callers against grid and redis,
// two rounds; redis peaks at 10, the grid at 50. batch at 50 only.
func sweepCells() []Cell {
	c := func(round int, w, t string, conc int, ops, p99 float64) Cell {
		return Cell{Round: round, Workload: w, Target: t, Concurrency: conc, Result: result(ops, p99, 0, 0)}
	}
	return []Cell{
		c(1, "reserve-unique", "grid", 10, 1000, 2000), c(1, "reserve-unique", "redis", 10, 9000, 300),
		c(1, "reserve-unique", "grid", 50, 3000, 5000), c(1, "reserve-unique", "redis", 50, 6000, 900),
		c(2, "reserve-unique", "grid", 10, 2000, 2000), c(2, "reserve-unique", "redis", 10, 8000, 500),
		c(2, "reserve-unique", "grid", 50, 4000, 7000), c(2, "reserve-unique", "redis", 50, 6000, 1100),
		c(1, "batch", "grid", 50, 50000, 40000), c(1, "batch", "redis", 50, 200000, 9000),
	}
}

func TestSummarizeSweepPerConcurrency(t *testing.T) {
	sums := Summarize(sweepCells(), []string{"reserve-unique", "batch"}, []string{"grid", "redis"})
	var got []string
	for _, s := range sums {
		got = append(got, s.Workload+"/"+s.Target+"/"+strings.Repeat("x", s.Concurrency/10))
	}
	want := []string{"reserve-unique/grid/x", "reserve-unique/redis/x", "reserve-unique/grid/xxxxx", "reserve-unique/redis/xxxxx",
		"batch/grid/xxxxx", "batch/redis/xxxxx"}
	if !slices.Equal(got, want) {
		t.Fatalf("summaries %v, want %v", got, want)
	}
	// Ratios to the grid of the same round at the same callers: at 10,
	// 9.0 and 4.0 -> 6.5; at 50, 2.0 and 1.5 -> 1.75.
	if r := sums[1]; r.OpsPerSec != 8500 || r.OpsRatio != 6.5 {
		t.Fatalf("redis at 10: %+v", r)
	}
	if r := sums[3]; r.OpsPerSec != 6000 || r.OpsRatio != 1.75 {
		t.Fatalf("redis at 50: %+v", r)
	}
	if !Swept(sums) || Swept(AtConcurrency(sums, 50)) {
		t.Fatal("Swept: want a sweep over both concurrencies, none at one")
	}
	if p, ok := Peak(sums, "reserve-unique", "redis"); !ok || p.Concurrency != 10 || p.OpsPerSec != 8500 {
		t.Fatalf("redis peak %+v %v", p, ok)
	}
	if p, ok := Peak(sums, "reserve-unique", "grid"); !ok || p.Concurrency != 50 || p.OpsPerSec != 3500 {
		t.Fatalf("grid peak %+v %v", p, ok)
	}
	if _, ok := Peak(sums, "batch", "grid"); ok {
		t.Fatal("a peak of batch, run at one concurrency")
	}
}

// The headline table has the rows of the headline concurrency and each
// target's peak over the sweep; the sweep table has every row.
func TestMarkdownSweep(t *testing.T) {
	sums := Summarize(sweepCells(), []string{"reserve-unique", "batch"}, []string{"grid", "redis"})
	md := Markdown(sums, 50)
	for _, want := range []string{"peak ops/s (callers)", "| reserve-unique | grid | 3500 | 1.00x |", "| 3500 (50) |",
		"| reserve-unique | redis | 6000 | 1.75x |", "| 8500 (10) |", "| batch | redis | 200000 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("headline table lacks %q:\n%s", want, md)
		}
	}
	if lines := strings.Count(md, "\n"); lines != 2+4 {
		t.Errorf("headline table has %d lines, want header, rule and 4 rows at 50:\n%s", lines, md)
	}
	if !strings.Contains(md, "| batch | grid | 50000 | 1.00x | 10.00 | 20.00 | 40.00 | 80.00 | 0 | 1 (25%) | - | - | - |") {
		t.Errorf("batch, not swept, has a peak:\n%s", md)
	}
	sw := MarkdownSweep(sums)
	for _, want := range []string{"| reserve-unique | 10 | redis | 8500 | 6.50x |", "| reserve-unique | 50 | grid | 3500 |"} {
		if !strings.Contains(sw, want) {
			t.Errorf("sweep table lacks %q:\n%s", want, sw)
		}
	}
	if strings.Contains(sw, "batch") || strings.Count(sw, "\n") != 2+4 {
		t.Errorf("sweep table should hold the 4 reserve-unique rows only:\n%s", sw)
	}
	if MarkdownSweep(AtConcurrency(sums, 50)) != "" {
		t.Error("a sweep table without a sweep")
	}
	var b bytes.Buffer
	if err := WriteText(&b, sums, []string{"reserve-unique", "batch"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "callers") || strings.Count(b.String(), "redis") != 3 {
		t.Errorf("text tables want a callers column and a row per concurrency:\n%s", b.String())
	}
}

// An open-loop row says what it was asked for, and when the target made
// fewer calls than Reached of it, that it could not keep up.
func TestOpenLoopRowsSayAskedRate(t *testing.T) {
	cell := func(round int, tg string, calls int64, rate float64) Cell {
		return Cell{Round: round, Workload: "reserve-unique@half-peak", Target: tg, Concurrency: 50, Rate: rate,
			Result: &workload.Result{Result: stats.Result{Calls: calls, Ops: calls, ElapsedSec: 10, OpsPerSec: float64(calls) / 10}}}
	}
	sums := Summarize([]Cell{cell(1, "grid", 9900, 1000), cell(2, "grid", 10000, 1000), cell(1, "etcd", 7000, 1000), cell(2, "etcd", 8000, 1000)},
		[]string{"reserve-unique@half-peak"}, []string{"grid", "etcd"})
	if g := sums[0]; g.AskedRate != 1000 || g.CallsPerSec != 995 {
		t.Fatalf("grid %+v", g)
	}
	md := Markdown(sums, 50)
	if !strings.Contains(md, "| grid | 995 (asked 1000 calls/s) |") {
		t.Errorf("the grid's row:\n%s", md)
	}
	if !strings.Contains(md, "| etcd | 750 (asked 1000 calls/s, made 750: 75%, could not keep up) |") {
		t.Errorf("etcd's row:\n%s", md)
	}
	closed := Summarize(testCells(), []string{"fill"}, []string{"grid"})
	if strings.Contains(Markdown(closed, 0), "asked") {
		t.Error("a closed-loop row speaks of an asked rate")
	}
}

// A sweep draws sweep-<workload> for the swept workload only; the
// throughput plot puts keys/s on a panel of its own.
func TestPlotSweepAndPanels(t *testing.T) {
	dir := t.TempDir()
	sums := Summarize(sweepCells(), []string{"reserve-unique", "batch"}, []string{"grid", "redis"})
	files, err := Plot(dir, sums, []string{"reserve-unique", "batch"}, []string{"grid", "redis"}, 50)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	want := []string{"throughput.png", "throughput.svg", "latency-reserve-unique.png", "latency-reserve-unique.svg",
		"latency-batch.png", "latency-batch.svg", "sweep-reserve-unique.png", "sweep-reserve-unique.svg"}
	if !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}
	width := func(name string) int {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return cfg.Width
	}
	if two, one := width("throughput.png"), width("latency-batch.png"); two <= one {
		t.Errorf("throughput.png %d px wide, one panel %d: want two panels", two, one)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "sweep-reserve-unique.svg"))
	if err != nil {
		t.Fatal(err)
	}
	// The points are labelled with their callers, and the log axis
	// with 1-2-5 figures.
	for _, want := range []string{">10<", ">50<", ">p99 ms (log scale)<", ">2<", ">5<"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("sweep plot lacks %q", want)
		}
	}
	// Only ops/s workloads: one panel.
	files, err = Plot(t.TempDir(), sums, []string{"reserve-unique"}, []string{"grid", "redis"}, 50)
	if err != nil || len(files) != 6 {
		t.Fatalf("files %v, %v", files, err)
	}
}

func TestLogTicks(t *testing.T) {
	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (logTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	if got := labels(0.3, 45); !slices.Equal(got, []string{"0.5", "1", "2", "5", "10", "20"}) {
		t.Errorf("0.3..45: %v", got)
	}
	if got := labels(3, 4.5); !slices.Equal(got, []string{"3", "4"}) {
		t.Errorf("3..4.5: %v", got)
	}
}
