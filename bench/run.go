package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/l4xg/grid/bench/internal/report"
	"github.com/l4xg/grid/bench/internal/workload"
	"github.com/l4xg/grid/internal/otlpsink"
	"github.com/l4xg/grid/internal/testcerts"
)

// results.json.
type resultsFile struct {
	Date      string            `json:"date"`
	Host      string            `json:"host"`
	CPUs      int               `json:"cpus"`
	GoVersion string            `json:"go_version"`
	Command   string            `json:"command"`
	Config    config            `json:"config"`
	Skipped   map[string]string `json:"skipped,omitempty"`
	Cells     []report.Cell     `json:"cells"`
	Summaries []report.Summary  `json:"summaries"`
}

func run(ctx context.Context, args []string) int {
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cfg.From != "" {
		return rewrite(cfg)
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)

	b := &bencher{cfg: cfg, tmp: tmp, log: os.Stderr, runID: fmt.Sprintf("%06x", cfg.Seed&0xffffff)}
	if cfg.GridTLS {
		if err := b.makeTLS(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if cfg.GridTracing {
		sink, err := otlpsink.Start(false)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() {
			fmt.Fprintf(os.Stderr, "bench: the OTLP receiver got %d spans from the gridnodes\n", sink.Count())
			sink.Close()
		}()
		b.gridEnv = sink.Env()
	}
	skipped := b.prepare(ctx)
	defer b.close()
	var targets []string
	for _, t := range cfg.Targets {
		if _, ok := skipped[t]; !ok {
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		fmt.Fprintln(os.Stderr, "bench: no target left to run")
		return 2
	}

	cells := b.rounds(ctx, targets)
	cells = append(cells, b.halfPeakRounds(ctx, targets, cells)...)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted; writing what was measured")
	}
	workloads := reported(cfg.Workloads, cells)
	sums := report.Summarize(cells, workloads, targets)
	if err := report.WriteText(os.Stdout, sums, workloads); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	host, _ := os.Hostname()
	rf := resultsFile{
		Date: time.Now().UTC().Format(time.RFC3339), Host: host, CPUs: runtime.NumCPU(),
		GoVersion: runtime.Version(), Command: "go run ./bench " + strings.Join(args, " "),
		Config: cfg, Skipped: skipped, Cells: cells, Summaries: sums,
	}
	if err := b.write(rf, sums, targets); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if ctx.Err() != nil {
		return 2
	}
	return 0
}

// makeTLS makes a CA and a certificate for 127.0.0.1 in the run's
// temporary directory, for --grid-tls.
func (b *bencher) makeTLS() error {
	ca, err := testcerts.NewCA("bench CA")
	if err != nil {
		return err
	}
	leaf, err := ca.Issue(testcerts.Options{CommonName: "gridnode"})
	if err != nil {
		return err
	}
	cert, key, err := leaf.Write(b.tmp, "gridnode")
	if err != nil {
		return err
	}
	caFile, err := ca.WriteCA(b.tmp, "ca")
	if err != nil {
		return err
	}
	b.gridTLSFlags = []string{"--cert-file", cert, "--key-file", key}
	if b.cfg.GridNodes > 1 {
		b.gridTLSFlags = append(b.gridTLSFlags, "--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", caFile)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	b.gridTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return nil
}

// bencher holds the targets of one run.
type bencher struct {
	cfg   config
	tmp   string
	log   io.Writer
	runID string
	bin   string // gridnode binary, when the grid is started here
	redis *redisShared
	aof   *durableRedis
	etcd  *etcdShared
	grid  *gridShared
	// gridEnv are more environment variables of the gridnodes started
	// (--grid-tracing: the OTLP receiver's).
	gridEnv []string
	// gridTLS is how to reach the gridnodes started with --grid-tls, and
	// gridTLSFlags their TLS flags; nil without it.
	gridTLS      *tls.Config
	gridTLSFlags []string
	// profile is the path of the CPU profile once taken.
	profile string
}

// prepare checks what each target needs and reports the targets skipped,
// with why.
func (b *bencher) prepare(ctx context.Context) map[string]string {
	skipped := map[string]string{}
	for _, t := range b.cfg.Targets {
		var err error
		switch t {
		case "grid":
			b.grid, err = newGridShared(ctx, b)
		case "redis":
			b.redis, err = newRedisShared(ctx, b)
		case "redis-durable":
			b.aof, err = newDurableRedis(b)
		case "etcd":
			b.etcd, err = newEtcdShared(ctx, b)
		}
		if err != nil {
			fmt.Fprintf(b.log, "bench: %s: skipped: %v\n", t, err)
			skipped[t] = err.Error()
		}
	}
	return skipped
}

func (b *bencher) close() {
	if b.redis != nil {
		b.redis.close()
	}
	if b.etcd != nil {
		b.etcd.close()
	}
	if b.grid != nil {
		b.grid.close()
	}
}

// rounds runs, per round, every workload against every target in turn
// (A B C A B C), so that drift of a shared machine hits all alike.
func (b *bencher) rounds(ctx context.Context, targets []string) []report.Cell {
	total := b.cfg.Rounds * len(b.cfg.Workloads) * len(targets)
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(b.progressWriter()),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.progressWriter()) }),
	)
	var cells []report.Cell
	for round := 1; round <= b.cfg.Rounds; round++ {
		for wi, w := range b.cfg.Workloads {
			for _, t := range targets {
				if ctx.Err() != nil {
					return cells
				}
				bar.Describe(fmt.Sprintf("round %d/%d %-14s %-5s", round, b.cfg.Rounds, w, t))
				cells = append(cells, b.measure(ctx, round, w, w, t, b.workloadConfig(round, wi)))
				_ = bar.Add(1)
			}
		}
	}
	return cells
}

// measure runs workload w against target t and returns it as the cell of
// the given round, under the name label.
func (b *bencher) measure(ctx context.Context, round int, label, w, t string, wcfg workload.Config) report.Cell {
	c := report.Cell{Round: round, Workload: label, Target: t}
	res, err := b.cell(ctx, w, t, wcfg)
	if err != nil {
		c.Error = err.Error()
		fmt.Fprintf(b.log, "\nbench: round %d %s %s: %v\n", round, label, t, err)
	} else {
		c.Result = &res
	}
	return c
}

// halfPeak names the open-loop runs of reserve-unique at half of each
// target's closed-loop peak (DESIGN.md section 8: p99 at half of peak).
const halfPeak = "reserve-unique@half-peak"

// halfPeakRounds runs, after the closed-loop rounds, reserve-unique open
// loop against every target at half of the median ops/s that target
// reached closed loop in them: as many rounds, each target in turn. It
// runs nothing without reserve-unique, with --half-peak=false, or with
// --rate (the run is open loop already); nor for a target whose every
// closed-loop round failed.
func (b *bencher) halfPeakRounds(ctx context.Context, targets []string, cells []report.Cell) []report.Cell {
	if !b.cfg.HalfPeak || b.cfg.Rate > 0 || !slices.Contains(b.cfg.Workloads, workload.ReserveUnique) {
		return nil
	}
	peaks := map[string]float64{}
	for _, s := range report.Summarize(cells, []string{workload.ReserveUnique}, targets) {
		peaks[s.Target] = s.OpsPerSec
	}
	var out []report.Cell
	for round := 1; round <= b.cfg.Rounds; round++ {
		for _, t := range targets {
			if ctx.Err() != nil || peaks[t] <= 0 {
				continue
			}
			wcfg := b.workloadConfig(round, len(b.cfg.Workloads))
			wcfg.Rate = peaks[t] / 2
			fmt.Fprintf(b.log, "bench: round %d/%d %s %s: %.0f calls/s\n", round, b.cfg.Rounds, halfPeak, t, wcfg.Rate)
			out = append(out, b.measure(ctx, round, halfPeak, workload.ReserveUnique, t, wcfg))
		}
	}
	return out
}

// reported is the workloads of the tables and plots: those asked for, and
// halfPeak when cells has its runs.
func reported(workloads []string, cells []report.Cell) []string {
	for _, c := range cells {
		if c.Workload == halfPeak {
			return append(slices.Clone(workloads), halfPeak)
		}
	}
	return workloads
}

func (b *bencher) progressWriter() io.Writer {
	if b.cfg.NoProgress {
		return io.Discard
	}
	return os.Stderr
}

// workloadConfig is the workload configuration of one cell. Its keys carry
// a prefix of their own: the run, the round and the workload.
func (b *bencher) workloadConfig(round, wi int) workload.Config {
	return workload.Config{
		Concurrency: b.cfg.Conc, Duration: b.cfg.Duration,
		Lease: b.cfg.Lease, Retention: b.cfg.Retention,
		DupRatio: b.cfg.DupRatio, BatchSize: b.cfg.Batch, Keys: b.cfg.Keys,
		KeyShape: b.cfg.KeyShape, Seed: b.cfg.Seed + uint64(round),
		Prefix: b.prefix(round, wi), Rate: b.cfg.Rate,
	}
}

func (b *bencher) prefix(round, wi int) string {
	return fmt.Sprintf("b%s-%d-%d:", b.runID, round, wi)
}

// cell runs one workload against one target, on a fresh server where the
// run owns it.
func (b *bencher) cell(ctx context.Context, w, t string, wcfg workload.Config) (workload.Result, error) {
	switch t {
	case "grid":
		return b.grid.run(ctx, w, wcfg)
	case "redis":
		return b.redis.run(ctx, w, wcfg)
	case "redis-durable":
		return b.aof.run(ctx, w, wcfg)
	case "etcd":
		return b.etcd.run(ctx, w, wcfg)
	}
	return workload.Result{}, fmt.Errorf("bench: unknown target %q", t)
}

// write saves results.json, table.md, the plots, and the README table.
func (b *bencher) write(rf resultsFile, sums []report.Summary, targets []string) error {
	js, err := json.MarshalIndent(rf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.cfg.Out, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	md := readmeBlock(rf, sums)
	if err := os.WriteFile(filepath.Join(b.cfg.Out, "table.md"), []byte(md), 0o644); err != nil {
		return err
	}
	var txt strings.Builder
	workloads := reported(b.cfg.Workloads, rf.Cells)
	_ = report.WriteText(&txt, sums, workloads)
	if err := os.WriteFile(filepath.Join(b.cfg.Out, "table.txt"), []byte(txt.String()), 0o644); err != nil {
		return err
	}
	files, err := report.Plot(b.cfg.Out, sums, workloads, targets)
	if err != nil {
		return err
	}
	fmt.Fprintf(b.log, "bench: wrote %s, table.md, table.txt and %d plots to %s\n", "results.json", len(files), b.cfg.Out)
	if b.cfg.Readme != "" {
		doc, err := os.ReadFile(b.cfg.Readme)
		if err != nil {
			return err
		}
		out, err := report.ReplaceBetween(string(doc), md)
		if err != nil {
			return fmt.Errorf("%s: %w", b.cfg.Readme, err)
		}
		if err := os.WriteFile(b.cfg.Readme, []byte(out), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(b.log, "bench: updated the table in %s\n", b.cfg.Readme)
	}
	return nil
}

// readmeBlock is the Markdown table with the run's date, machine and command.
func readmeBlock(rf resultsFile, sums []report.Summary) string {
	var s strings.Builder
	fmt.Fprintf(&s, "Run %s on %s (%d cores, shared with other work; figures are noisy, ratios within the run are what count), %s.\n\n",
		rf.Date, rf.Host, rf.CPUs, rf.GoVersion)
	fmt.Fprintf(&s, "```sh\n%s\n```\n\n", rf.Command)
	if t := describeTargets(rf); t != "" {
		fmt.Fprintf(&s, "Targets: %s.\n\n", t)
	}
	s.WriteString(report.Markdown(sums))
	s.WriteString("\nops/s and latencies: median of the rounds; \"vs grid\": the target's figure over the grid's in the same round (median of rounds); ")
	s.WriteString("batch and fill count keys, lifecycle counts reserve+complete+refused duplicate; latency is per call (per batch for batch and fill). ")
	var mem []string
	for _, sm := range sums {
		if !sm.HasBytes {
			continue
		}
		m := fmt.Sprintf("%s from %s", sm.Target, sm.MemorySource)
		for _, k := range slices.Sorted(maps.Keys(sm.ExtraPerKey)) {
			m += fmt.Sprintf(" (%s: %.1f B/key)", k, sm.ExtraPerKey[k])
		}
		mem = append(mem, m)
	}
	if len(mem) > 0 {
		fmt.Fprintf(&s, "bytes/key: the server's figure after fill minus before, over the keys: %s. ", strings.Join(mem, "; "))
	}
	if len(rf.Skipped) > 0 {
		ks := make([]string, 0, len(rf.Skipped))
		for k, v := range rf.Skipped {
			ks = append(ks, k+" ("+v+")")
		}
		slices.Sort(ks)
		fmt.Fprintf(&s, "Skipped: %s. ", strings.Join(ks, ", "))
	}
	s.WriteString("\n")
	if bd := report.MarkdownBreakdown(sums); bd != "" {
		s.WriteString("\nWhere the grid's time goes (median of rounds; the grid's own counters read before and after each run, summed over its nodes):\n\n")
		s.WriteString(bd)
	}
	return s.String()
}

// describeTargets says what each target that ran was: how many grid nodes
// and replicas, which Redis, how many etcd members.
func describeTargets(rf resultsFile) string {
	c := rf.Config
	var out []string
	for _, t := range c.Targets {
		if _, skipped := rf.Skipped[t]; skipped {
			continue
		}
		switch t {
		case "grid":
			switch {
			case c.Addr != "":
				out = append(out, "grid: the running grid at "+c.Addr)
			case c.GridNodes > 1:
				r := c.GridReplicas
				if r == 0 {
					r = min(3, c.GridNodes)
				}
				out = append(out, fmt.Sprintf("grid: %d gridnode processes as one cluster, %d replicas per shard, fsync on, "+
					"through the routing client dialled with every node's address", c.GridNodes, r))
			default:
				out = append(out, "grid: one gridnode process, fsync on")
			}
		case "redis":
			out = append(out, "redis: "+c.RedisAddr)
		case "redis-durable":
			out = append(out, "redis-durable: a throwaway redis-server, appendonly yes, appendfsync always")
		case "etcd":
			if len(c.EtcdEPs) > 0 {
				out = append(out, "etcd: "+strings.Join(c.EtcdEPs, ","))
			} else {
				out = append(out, fmt.Sprintf("etcd: a throwaway %d-member cluster, fsync on", c.EtcdMembrs))
			}
		}
	}
	return strings.Join(out, "; ")
}

// rewrite writes the outputs again from a results.json, running nothing.
func rewrite(cfg config) int {
	js, err := os.ReadFile(cfg.From)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var rf resultsFile
	if err := json.Unmarshal(js, &rf); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cfg.From, err)
		return 1
	}
	var targets []string
	for _, t := range rf.Config.Targets {
		if _, ok := rf.Skipped[t]; !ok {
			targets = append(targets, t)
		}
	}
	workloads := reported(rf.Config.Workloads, rf.Cells)
	rf.Summaries = report.Summarize(rf.Cells, workloads, targets)
	if err := report.WriteText(os.Stdout, rf.Summaries, workloads); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	b := &bencher{cfg: rf.Config, log: os.Stderr}
	b.cfg.Out, b.cfg.Readme = cfg.Out, cfg.Readme
	if err := b.write(rf, rf.Summaries, targets); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}
