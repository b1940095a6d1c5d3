package main

import (
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
	for _, args := range [][]string{
		{"--grid-nodes", "0"}, {"--grid-nodes", "10"}, {"--grid-nodes", "3", "--grid-replicas", "4"},
		{"--grid-replicas", "1"}, {"--grid-nodes", "3", "--grid-replicas", "-1"}, {"--grid-nodes", "3", "--addr", "127.0.0.1:7420"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	c, err := parseFlags([]string{"--grid-nodes", "3", "--etcd-members", "3"}, io.Discard)
	if err != nil || c.GridNodes != 3 || c.GridReplicas != 0 || c.EtcdMembrs != 3 {
		t.Fatalf("--grid-nodes 3: %+v, %v", c, err)
	}
	if c, err = parseFlags([]string{"--grid-nodes", "3", "--grid-replicas", "1"}, io.Discard); err != nil || c.GridReplicas != 1 {
		t.Fatalf("--grid-replicas 1: %+v, %v", c, err)
	}
	c, err = parseFlags([]string{"--targets", " redis , etcd", "batch", "fill"}, io.Discard)
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
		Config:  config{Targets: allTargets, GridNodes: 1, EtcdMembrs: 1, RedisAddr: "127.0.0.1:6379"},
		Skipped: map[string]string{"etcd": "not found"}}
	md := readmeBlock(rf, []report.Summary{{Workload: "fill", Target: "grid", OpsPerSec: 1}})
	for _, want := range []string{"2026-12-02T16:00:00Z", "2 cores", "go run ./bench fill", "| fill | grid |", "etcd (not found)",
		"grid: one gridnode process", "redis: 127.0.0.1:6379"} {
		if !strings.Contains(md, want) {
			t.Errorf("block lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "etcd: ") {
		t.Errorf("block describes the skipped etcd:\n%s", md)
	}
	rf.Config.GridNodes, rf.Config.EtcdMembrs, rf.Skipped = 3, 3, nil
	md = readmeBlock(rf, nil)
	for _, want := range []string{"grid: 3 gridnode processes as one cluster, 3 replicas per shard", "etcd: a throwaway 3-member cluster"} {
		if !strings.Contains(md, want) {
			t.Errorf("block lacks %q:\n%s", want, md)
		}
	}
	rf.Config.GridReplicas = 2
	if md = readmeBlock(rf, nil); !strings.Contains(md, "2 replicas per shard") {
		t.Errorf("--grid-replicas 2:\n%s", md)
	}
}
