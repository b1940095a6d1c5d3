package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/bench/internal/report"
	"github.com/l4xg/grid/bench/internal/target"
	"github.com/l4xg/grid/bench/internal/workload"
)

func TestFlagDefaults(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Conc != 50 || !slices.Equal(c.Concs, []int{50}) || c.PostgresDSN != defaultPostgresDSN || c.Duration != 10*time.Second || c.Rounds != 2 || c.RedisAddr != "127.0.0.1:6379" ||
		!slices.Equal(c.Targets, allTargets) || !slices.Equal(c.Workloads, workload.Names) || !strings.HasPrefix(c.Out, "bench/results/") {
		t.Fatalf("defaults %+v", c)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--targets", "grid,mysql"}, {"nope"}, {"--dup-ratio", "2"}, {"--key-shape", "x"},
		{"--lease", "10ms"}, {"--batch", "1001"}, {"--etcd-members", "2"}, {"--concurrency", "0"}, {"--rate", "-1"},
		{"--cpuprofile-grid", "--cpuprofile-workload", "batch", "reserve-unique"}, {"--cpuprofile-grid", "batch"},
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
	if c, err = parseFlags([]string{"--cpuprofile-grid", "--cpuprofile-workload", "batch", "batch"}, io.Discard); err != nil || !c.CPUProfile || c.ProfileWorkload != "batch" {
		t.Fatalf("--cpuprofile-workload batch: %+v, %v", c, err)
	}
	c, err = parseFlags([]string{"--targets", " redis , etcd", "batch", "fill"}, io.Discard)
	if err != nil || !slices.Equal(c.Targets, []string{"redis", "etcd"}) || !slices.Equal(c.Workloads, []string{"batch", "fill"}) {
		t.Fatalf("%v %v %v", c.Targets, c.Workloads, err)
	}
}

// Every cell's keys have a prefix of their own, so that a round's keys are
// new and cleanup removes only them: no prefix starts another (Redis's
// cleanup is SCAN MATCH prefix*), and no two name the same postgres table.
func TestCellPrefixesDiffer(t *testing.T) {
	b := &bencher{runID: "abc123"}
	var all []string
	tables := map[string]bool{}
	for round := 1; round <= 3; round++ {
		for wi := range len(workload.Names) + 1 {
			for ci := range 12 {
				p := b.prefix(round, wi, ci)
				if !strings.HasPrefix(p, "babc123-") {
					t.Fatalf("prefix %q without the run id", p)
				}
				if tables[target.TableName(p)] {
					t.Fatalf("prefix %q: table %s repeated", p, target.TableName(p))
				}
				tables[target.TableName(p)] = true
				all = append(all, p)
			}
		}
	}
	for i, p := range all {
		for j, q := range all {
			if i != j && strings.HasPrefix(q, p) {
				t.Fatalf("prefix %q starts %q", p, q)
			}
		}
	}
	if p := b.prefix(2, 1, 0); p != "babc123-2-1:" {
		t.Fatalf("without a sweep the prefix is %q, want the one of before the sweep", p)
	}
}

func TestConcurrencySweepFlags(t *testing.T) {
	for _, c := range []struct {
		arg      string
		concs    []int
		headline int
	}{
		{"50", []int{50}, 50}, {"7", []int{7}, 7}, {"10,50,200,800", []int{10, 50, 200, 800}, 50},
		{"800, 10", []int{800, 10}, 800}, {"10,200", []int{10, 200}, 10},
	} {
		cfg, err := parseFlags([]string{"--concurrency", c.arg}, io.Discard)
		if err != nil || !slices.Equal(cfg.Concs, c.concs) || cfg.Conc != c.headline {
			t.Errorf("--concurrency %s: %v headline %d (%v), want %v headline %d", c.arg, cfg.Concs, cfg.Conc, err, c.concs, c.headline)
		}
	}
	for _, args := range [][]string{
		{"--concurrency", "10,x"}, {"--concurrency", "10,10"}, {"--concurrency", ","}, {"--concurrency", "10,-1"},
		{"--concurrency", "10,50", "--rate", "100"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	cfg, err := parseFlags([]string{"--concurrency", "10,200,50", "--rate", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.maxConc() != 200 || !slices.Equal(cfg.concsOf(workload.Batch), []int{10, 200, 50}) || !slices.Equal(cfg.concsOf(workload.Fill), []int{50}) {
		t.Fatalf("max %d, batch at %v, fill at %v", cfg.maxConc(), cfg.concsOf(workload.Batch), cfg.concsOf(workload.Fill))
	}
	if cfg, err := parseFlags([]string{"--concurrency", "20", "--rate", "100"}, io.Discard); err != nil || cfg.Rate != 100 {
		t.Fatalf("one concurrency with --rate: %v", err)
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

// The postgres target says where it ran, and that it was not durable when
// the server's settings say so, and why its pool is smaller than asked.
func TestDescribePostgres(t *testing.T) {
	i := target.PostgresInfo{Server: "h:5432/test as postgres", Version: "15.20", Fsync: "on", SynchronousCommit: "on", PoolSize: 58, Asked: 58}
	d := describePostgres(i)
	if !strings.Contains(d, "PostgreSQL 15.20 at h:5432/test as postgres") || !strings.Contains(d, "fsync on, synchronous_commit on,") ||
		strings.Contains(d, "NOT durable") || !strings.Contains(d, "a pool of 58 connections") || strings.Contains(d, "capped") {
		t.Errorf("durable: %s", d)
	}
	i.SynchronousCommit, i.PoolSize, i.Asked, i.MaxConnections, i.Capped = "off", 80, 808, 97, true
	if d := describePostgres(i); !strings.Contains(d, "synchronous_commit off: NOT durable") || !strings.Contains(d, "a pool of 80 connections (capped from 808 by the server's max_connections)") {
		t.Errorf("not durable, capped: %s", d)
	}
}
