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
	// Notes say what a target was found to be when the run began (the
	// postgres server, its durability, its pool), by target.
	Notes     map[string]string `json:"notes,omitempty"`
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
		Config: cfg, Skipped: skipped, Notes: b.notes, Cells: cells, Summaries: sums,
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
	pg    *postgresShared
	// notes say what prepare found of a target (the postgres server, its
	// durability, its pool), for the results.
	notes map[string]string
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
		case "postgres":
			b.pg, err = newPostgresShared(ctx, b)
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
	if b.pg != nil {
		b.pg.close()
	}
}

// rounds runs, per round, every workload at each of its concurrencies
// against every target in turn (A B C A B C), so that drift of a shared
// machine hits all alike.
func (b *bencher) rounds(ctx context.Context, targets []string) []report.Cell {
	total := 0
	for _, w := range b.cfg.Workloads {
		total += b.cfg.Rounds * len(b.cfg.concsOf(w)) * len(targets)
	}
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
			for ci, conc := range b.cfg.concsOf(w) {
				for _, t := range targets {
					if ctx.Err() != nil {
						return cells
					}
					bar.Describe(fmt.Sprintf("round %d/%d %-14s %4d %-5s", round, b.cfg.Rounds, w, conc, t))
					cells = append(cells, b.measure(ctx, round, w, w, t, b.workloadConfig(round, wi, ci, conc)))
					_ = bar.Add(1)
				}
			}
		}
	}
	return cells
}

// measure runs workload w against target t and returns it as the cell of
// the given round, under the name label.
func (b *bencher) measure(ctx context.Context, round int, label, w, t string, wcfg workload.Config) report.Cell {
	c := report.Cell{Round: round, Workload: label, Target: t, Concurrency: wcfg.Concurrency, Rate: wcfg.Rate}
	res, err := b.cell(ctx, w, t, wcfg)
	if err != nil {
		c.Error = err.Error()
		fmt.Fprintf(b.log, "\nbench: round %d %s %s (%d callers): %v\n", round, label, t, wcfg.Concurrency, err)
	} else {
		c.Result = &res
	}
	return c
}

// halfPeak names the open-loop runs of reserve-unique at half of each
// target's closed-loop peak (docs/design.md section 8: p99 at half of peak).
const halfPeak = "reserve-unique@half-peak"

// halfPeakRounds runs, after the closed-loop rounds, reserve-unique open
// loop against every target at half of the median ops/s that target
// reached closed loop in them at the headline concurrency, with that many
// callers: as many rounds, each target in turn. It runs nothing without
// reserve-unique, with --half-peak=false, or with --rate (the run is open
// loop already); nor for a target whose every closed-loop round failed.
func (b *bencher) halfPeakRounds(ctx context.Context, targets []string, cells []report.Cell) []report.Cell {
	if !b.cfg.HalfPeak || b.cfg.Rate > 0 || !slices.Contains(b.cfg.Workloads, workload.ReserveUnique) {
		return nil
	}
	rates := halfPeakRates(cells, targets, b.cfg.Conc)
	var out []report.Cell
	for round := 1; round <= b.cfg.Rounds; round++ {
		for _, t := range targets {
			if ctx.Err() != nil || rates[t] <= 0 {
				continue
			}
			wcfg := b.workloadConfig(round, len(b.cfg.Workloads), 0, b.cfg.Conc)
			wcfg.Rate = rates[t]
			fmt.Fprintf(b.log, "bench: round %d/%d %s %s: %.0f calls/s\n", round, b.cfg.Rounds, halfPeak, t, wcfg.Rate)
			out = append(out, b.measure(ctx, round, halfPeak, workload.ReserveUnique, t, wcfg))
		}
	}
	return out
}

// halfPeakRates is, per target, half of the median ops/s of its
// closed-loop reserve-unique rounds at concurrency conc: the rate of its
// half-peak runs.
func halfPeakRates(cells []report.Cell, targets []string, conc int) map[string]float64 {
	rates := map[string]float64{}
	for _, s := range report.Summarize(cells, []string{workload.ReserveUnique}, targets) {
		if s.Concurrency == conc {
			rates[s.Target] = s.OpsPerSec / 2
		}
	}
	return rates
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

// workloadConfig is the workload configuration of one cell, the ci-th
// concurrency of its workload, conc callers. Its keys carry a prefix of
// their own: the run, the round, the workload and the concurrency.
func (b *bencher) workloadConfig(round, wi, ci, conc int) workload.Config {
	return workload.Config{
		Concurrency: conc, Duration: b.cfg.Duration,
		Lease: b.cfg.Lease, Retention: b.cfg.Retention,
		DupRatio: b.cfg.DupRatio, BatchSize: b.cfg.Batch, Keys: b.cfg.Keys,
		KeyShape: b.cfg.KeyShape, Seed: b.cfg.Seed + uint64(round),
		Prefix: b.prefix(round, wi, ci), Rate: b.cfg.Rate,
	}
}

// prefix is the key prefix of a cell: b<run>-<round>-<workload>: for the
// first concurrency of its workload (all of them without a sweep),
// b<run>-<round>-<workload>-<ci>: for the others. No prefix starts
// another (Redis's cleanup removes prefix*).
func (b *bencher) prefix(round, wi, ci int) string {
	if ci == 0 {
		return fmt.Sprintf("b%s-%d-%d:", b.runID, round, wi)
	}
	return fmt.Sprintf("b%s-%d-%d-%d:", b.runID, round, wi, ci)
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
	case "postgres":
		return b.pg.run(ctx, w, wcfg)
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
	files, err := report.Plot(b.cfg.Out, sums, workloads, targets, b.cfg.Conc)
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
	headline := rf.Config.Conc
	s.WriteString(report.Markdown(sums, headline))
	s.WriteString("\nops/s and latencies: median of the rounds; \"vs grid\": the target's figure over the grid's in the same round (median of rounds); ")
	s.WriteString("batch and fill count keys, lifecycle counts reserve+complete+refused duplicate; latency is per call (per batch for batch and fill). ")
	swept := report.Swept(sums)
	if swept {
		fmt.Fprintf(&s, "Rows at %d callers (of %s); \"peak\": the target's highest ops/s over them, with the callers it was reached with. ",
			headline, joinInts(rf.Config.Concs))
	}
	if hasRate(sums) {
		fmt.Fprintf(&s, "Open-loop rows say the calls/s they were asked for; a target that made fewer than %.0f%% of them could not keep up, and its row says so. ",
			100*report.Reached)
	}
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
	if swept {
		s.WriteString("\nThe sweep, every concurrency (callers) of the workloads run at several (median of rounds; plots sweep-<workload>.png):\n\n")
		s.WriteString(report.MarkdownSweep(sums))
	}
	if bd := report.MarkdownBreakdown(report.AtConcurrency(sums, headline)); bd != "" {
		at := ""
		if swept {
			at = fmt.Sprintf(", at %d callers", headline)
		}
		fmt.Fprintf(&s, "\nWhere the grid's time goes (median of rounds%s; the grid's own counters read before and after each run, summed over its nodes):\n\n", at)
		s.WriteString(bd)
	}
	return s.String()
}

// hasRate reports whether any summary is of an open-loop run.
func hasRate(sums []report.Summary) bool {
	for _, s := range sums {
		if s.AskedRate > 0 {
			return true
		}
	}
	return false
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
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
		case "postgres":
			out = append(out, "postgres: "+rf.Notes["postgres"])
		}
	}
	return strings.Join(out, "; ")
}

// upgrade fills in what results written before the concurrency sweep
// lack: their single concurrency (config and cells), and the rate each
// open-loop cell was asked for (--rate, or half of the target's
// closed-loop reserve-unique ops/s for the half-peak runs, as
// halfPeakRounds computed it).
func upgrade(rf *resultsFile, targets []string) {
	c := &rf.Config
	if len(c.Concs) == 0 {
		c.Concs = []int{c.Conc}
	}
	if c.Conc == 0 {
		c.Conc = headline(c.Concs)
	}
	for i := range rf.Cells {
		if rf.Cells[i].Concurrency == 0 {
			rf.Cells[i].Concurrency = c.Conc
		}
	}
	half := halfPeakRates(rf.Cells, targets, c.Conc)
	for i := range rf.Cells {
		cell := &rf.Cells[i]
		switch {
		case cell.Rate > 0:
		case cell.Workload == halfPeak:
			cell.Rate = half[cell.Target]
		case c.Rate > 0:
			cell.Rate = c.Rate
		}
	}
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
	upgrade(&rf, targets)
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
