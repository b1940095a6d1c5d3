package main

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/bench/internal/report"
	"github.com/l4xg/grid/bench/internal/workload"
)

func TestFlagDefaults(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Conc != 50 || c.Duration != 10*time.Second || c.Rounds != 2 || c.RedisAddr != "127.0.0.1:6379" ||
		!slices.Equal(c.Targets, allTargets) || !slices.Equal(c.Workloads, workload.Names) || !strings.HasPrefix(c.Out, "bench/results/") {
		t.Fatalf("defaults %+v", c)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--targets", "grid,mysql"}, {"nope"}, {"--dup-ratio", "2"}, {"--key-shape", "x"},
		{"--lease", "10ms"}, {"--batch", "1001"}, {"--etcd-members", "2"}, {"--concurrency", "0"}, {"--rate", "-1"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	_, err := parseFlags([]string{"--grid-nodes", "3"}, io.Discard)
	if !errors.Is(err, ErrNoCluster) || !strings.Contains(err.Error(), "clustering not available yet") {
		t.Fatalf("--grid-nodes 3: %v", err)
	}
	if _, err := parseFlags([]string{"--grid-nodes", "3", "--targets", "redis"}, io.Discard); err != nil {
		t.Fatalf("--grid-nodes without the grid target: %v", err)
	}
	c, err := parseFlags([]string{"--targets", " redis , etcd", "batch", "fill"}, io.Discard)
	if err != nil || !slices.Equal(c.Targets, []string{"redis", "etcd"}) || !slices.Equal(c.Workloads, []string{"batch", "fill"}) {
		t.Fatalf("%v %v %v", c.Targets, c.Workloads, err)
	}
}

// Every cell's keys have a prefix of their own, so that a round's keys are
// new and cleanup removes only them.
func TestCellPrefixesDiffer(t *testing.T) {
	b := &bencher{runID: "abc123"}
	seen := map[string]bool{}
	for round := 1; round <= 3; round++ {
		for wi := range workload.Names {
			p := b.prefix(round, wi)
			if seen[p] || !strings.HasPrefix(p, "babc123-") {
				t.Fatalf("prefix %q repeated or without the run id", p)
			}
			seen[p] = true
		}
	}
}

func TestReadmeBlockStatesDateMachineAndCommand(t *testing.T) {
	rf := resultsFile{Date: "2026-12-02T16:00:00Z", Host: "h", CPUs: 2, GoVersion: "go1.26", Command: "go run ./bench fill",
		Skipped: map[string]string{"etcd": "not found"}}
	md := readmeBlock(rf, []report.Summary{{Workload: "fill", Target: "grid", OpsPerSec: 1}})
	for _, want := range []string{"2026-12-02T16:00:00Z", "2 cores", "go run ./bench fill", "| fill | grid |", "etcd (not found)"} {
		if !strings.Contains(md, want) {
			t.Errorf("block lacks %q:\n%s", want, md)
		}
	}
}
