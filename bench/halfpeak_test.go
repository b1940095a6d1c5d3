package main

import (
	"context"
	"io"
	"os/exec"
	"slices"
	"testing"

	"github.com/l4xg/grid/bench/internal/report"
	"github.com/l4xg/grid/bench/internal/workload"
)

// After the closed-loop rounds, every target runs reserve-unique open loop
// at half of its own closed-loop peak, once per round: the running Redis
// and the durable one this run starts.
func TestHalfPeakRounds(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("redis-server not on PATH: %v", err)
	}
	ctx := context.Background()
	cfg, err := parseFlags([]string{"--targets", "redis,redis-durable", "--duration", "400ms", "--rounds", "2",
		"--concurrency", "4", "--no-progress", "--out", t.TempDir(), workload.ReserveUnique}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := &bencher{cfg: cfg, log: io.Discard, runID: "hp0001"}
	if skipped := b.prepare(ctx); len(skipped) > 0 {
		t.Skipf("targets skipped: %v", skipped)
	}
	defer b.close()
	targets := cfg.Targets
	cells := b.rounds(ctx, targets)
	half := b.halfPeakRounds(ctx, targets, cells)
	if len(half) != len(targets)*cfg.Rounds {
		t.Fatalf("%d half-peak cells, want %d", len(half), len(targets)*cfg.Rounds)
	}
	peaks := map[string]float64{}
	for _, s := range report.Summarize(cells, []string{workload.ReserveUnique}, targets) {
		peaks[s.Target] = s.OpsPerSec
	}
	for _, c := range half {
		if c.Workload != halfPeak || c.Result == nil || c.Result.Ops == 0 {
			t.Fatalf("half-peak cell %+v", c)
		}
		// Paced at half the peak, a run cannot go faster than that rate
		// (a tenth more for the start-up of the pacing).
		if rate := peaks[c.Target] / 2; c.Result.OpsPerSec > 1.1*rate {
			t.Errorf("%s round %d: %.0f ops/s at a pace of %.0f calls/s", c.Target, c.Round, c.Result.OpsPerSec, rate)
		}
	}
	all := append(cells, half...)
	if w := reported(cfg.Workloads, all); !slices.Equal(w, []string{workload.ReserveUnique, halfPeak}) {
		t.Fatalf("reported workloads %v", w)
	}
	if w := reported(cfg.Workloads, cells); !slices.Equal(w, cfg.Workloads) {
		t.Fatalf("reported workloads without half-peak cells %v", w)
	}

	b.cfg.Rate = 100
	if got := b.halfPeakRounds(ctx, targets, cells); got != nil {
		t.Fatalf("--rate run got half-peak cells %v", got)
	}
	b.cfg.Rate, b.cfg.HalfPeak = 0, false
	if got := b.halfPeakRounds(ctx, targets, cells); got != nil {
		t.Fatalf("--half-peak=false run got half-peak cells %v", got)
	}
}
