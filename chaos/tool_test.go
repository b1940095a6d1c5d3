package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/internal/machinelock"
	"github.com/l4xg/grid/internal/netlab"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// gridnodeBin builds gridnode once for the tests of this file.
func gridnodeBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chaos-tool-test-")
		if err != nil {
			binErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binPath, binErr = gridproc.BuildGridnode(ctx, "", dir)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// canPartition reports whether network namespaces can be made here (the
// partition fault needs them).
func canPartition(t *testing.T) bool {
	lab, err := netlab.New(1)
	if errors.Is(err, netlab.ErrUnavailable) {
		t.Logf("no partitions here: %v", err)
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	return true
}

// seedWith is the first seed from 1 whose schedule under args has every
// kind of fault of want, and, if variant is not "", a partition of that
// variant first among the partitions: tests run schedules known to hold
// the faults they need.
func seedWith(t *testing.T, args []string, want []string, variants ...string) uint64 {
	t.Helper()
	for s := uint64(1); s < 1000; s++ {
		cfg, err := parseRun(append(slices.Clone(args), "--seed", fmt.Sprint(s)), os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]bool{}
		partition := ""
		for _, p := range plan(cfg) {
			kinds[p.Kind] = true
			if p.Kind == faultPartition && partition == "" {
				partition = p.Variant
			}
		}
		ok := true
		for _, k := range want {
			ok = ok && kinds[k]
		}
		if ok && (len(variants) == 0 || slices.Contains(variants, partition)) {
			return s
		}
	}
	t.Fatalf("no seed below 1000 schedules %v", want)
	return 0
}

// chaosRun runs the tool on args, in a temporary --out, and returns the
// outcome and the out directory.
func chaosRun(t *testing.T, args []string) (*outcome, string) {
	t.Helper()
	out := t.TempDir()
	args = append(slices.Clone(args), "--out", out, "--gridnode-bin", gridnodeBin(t), "--progress=false")
	cfg, err := parseRun(args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replay: %s", replay(cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log strings.Builder
	o, err := runChaos(ctx, cfg, &syncWriter{w: &log})
	t.Logf("events:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	return o, out
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// readSummary reads summary.json as a script would.
func readSummary(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"verdict", "seed", "faults", "checks"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("summary.json has no %q", k)
		}
	}
	return m
}

// TestRunPassesUnderFaults: a short seeded run on three real processes
// with kill -9, SIGSTOP past the lease, a full-cluster crash and a
// partition (where network namespaces can be made) passes every check, makes each fault, and
// writes the report and the summary scripts rely on.
func TestRunPassesUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real processes")
	}
	machinelock.Shared(t)
	faults := []string{faultKill, faultPause, faultRestart}
	if canPartition(t) {
		faults = append(faults, faultPartition)
	}
	args := []string{"--nodes", "3", "--duration", "30s", "--fault-every", "5s", "--faults", strings.Join(faults, ",")}
	args = append(args, "--seed", fmt.Sprint(seedWith(t, args, faults)), "--node-log-level", "info")
	o, dir := chaosRun(t, args)
	for _, c := range o.checks {
		t.Logf("%s: pass %v: %s", c.Name, c.Pass, c.Detail)
	}
	if !o.verdict {
		t.Fatalf("the run failed: see the checks above and %s", filepath.Join(dir, "report.html"))
	}
	made := map[string]int{}
	for _, f := range o.faults {
		if f.Err != "" {
			t.Errorf("fault %s: %s", f.planned, f.Err)
		}
		made[f.Kind]++
	}
	for _, k := range faults {
		if made[k] == 0 {
			t.Errorf("no %s fault was made: %v", k, made)
		}
	}
	if m := readSummary(t, dir); m["verdict"] != "PASS" {
		t.Errorf("summary verdict %v", m["verdict"])
	}
	for _, f := range []string{"report.html", "throughput.png", "latency.png", "errors.png", "history.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// --node-log-level reached the nodes (the default, warn, hides info).
	if b, err := os.ReadFile(filepath.Join(dir, "nodes", "n1.log")); err != nil || !strings.Contains(string(b), "level=INFO") {
		t.Errorf("node n1's log has no INFO line with --node-log-level info (%v)", err)
	}
}

// TestRunCatchesBrokenGrids: the tool run through the deliberately broken
// grids of the test suite fails its verdict, and the report names a key:
// if it passed, its pass would prove nothing.
func TestRunCatchesBrokenGrids(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real processes")
	}
	machinelock.Shared(t)
	cases := []struct {
		broken string
		faults []string
	}{
		{"stale-gets", nil},
		{"lost-completes", nil},
		{"follower-reads", []string{faultPartition}},
	}
	partitions := canPartition(t)
	for _, c := range cases {
		t.Run(c.broken, func(t *testing.T) {
			if slices.Contains(c.faults, faultPartition) && !partitions {
				t.Skip("needs network namespaces for the partition")
			}
			args := []string{"--nodes", "3", "--duration", "12s", "--workload", "register", "--keys", "3",
				"--broken", c.broken, "--faults", joinOr(c.faults, "none"), "--fault-every", "3s"}
			if len(c.faults) > 0 {
				// A partition that cuts a node off, whose reads then
				// miss the majority's writes.
				args = append(args, "--seed", fmt.Sprint(seedWith(t, args, c.faults, "isolate", "split")))
			}
			o, dir := chaosRun(t, args)
			if o.verdict {
				t.Fatalf("a grid broken by %s passed", c.broken)
			}
			var lin result
			for _, r := range o.checks {
				if r.Name == "linearizability" {
					lin = r
				}
			}
			t.Logf("linearizability: %s", lin.Detail)
			if lin.Pass || lin.Key == "" {
				t.Fatalf("linearizability %+v: want a failure naming the key", lin)
			}
			if m := readSummary(t, dir); m["verdict"] != "FAIL" {
				t.Errorf("summary verdict %v", m["verdict"])
			}
			page, err := os.ReadFile(filepath.Join(dir, "report.html"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(page), lin.Key) || !strings.Contains(string(page), "FAIL") {
				t.Errorf("report.html does not name the failing key %q", lin.Key)
			}
		})
	}
}

// TestPlanIsDeterministic: a seed replays the same schedule; the kinds
// come in cycles, so each kind asked for is made.
func TestPlanIsDeterministic(t *testing.T) {
	args := []string{"--nodes", "5", "--duration", "10m", "--faults", "all", "--seed", "42"}
	cfg, err := parseRun(args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	a, b := plan(cfg), plan(cfg)
	if len(a) == 0 || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("two plans of seed 42 differ or are empty:\n%v\n%v", a, b)
	}
	count := map[string]int{}
	for i, p := range a {
		count[p.Kind]++
		if i > 0 && p.At <= a[i-1].At+a[i-1].Hold {
			t.Errorf("fault %d (%s) starts before fault %d ends", i, p, i-1)
		}
		if p.At+p.Hold > cfg.Duration-cooldown {
			t.Errorf("fault %s ends in the cooldown", p)
		}
	}
	for _, k := range allFaults {
		if count[k] < len(a)/len(allFaults)-1 {
			t.Errorf("%s made %d times of %d faults", k, count[k], len(a))
		}
	}
	cfg.Seed = 43
	if fmt.Sprint(plan(cfg)) == fmt.Sprint(a) {
		t.Error("seeds 42 and 43 plan the same schedule")
	}
}

// TestParseRunRefuses: bad settings are refused, naming the flag.
func TestParseRunRefuses(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--nodes 2", "--nodes"},
		{"--nodes 6", "--nodes"},
		{"--faults kill,flood", `unknown fault "flood"`},
		{"--duration 1s", "--duration"},
		{"--workload chat", "--workload"},
		{"--broken yes", "--broken"},
		{"--broken stale-gets --workload app", "--broken needs the register workload"},
		{"--max-clock-offset 2s", "--max-clock-offset"},
		{"--node-log-level chatty", "--node-log-level"},
	} {
		var stderr strings.Builder
		_, err := parseRun(strings.Fields(c.args), &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}

// Without --shards a run has one shard per node, so that every node leads
// one and the spare of the churn faults takes replicas when it joins;
// --shards is taken as given.
func TestParseRunShards(t *testing.T) {
	for _, c := range []struct {
		args string
		want int
	}{
		{"--nodes 3", 3},
		{"--nodes 5 --replicas 3", 5},
		{"--nodes 3 --shards 1", 1},
		{"--nodes 4 --shards 8", 8},
	} {
		var stderr strings.Builder
		cfg, err := parseRun(strings.Fields(c.args), &stderr)
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		if cfg.Shards != c.want {
			t.Errorf("%s: %d shards, want %d", c.args, cfg.Shards, c.want)
		}
	}
}
