package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/l4xg/grid/bench/internal/workload"
)

// config is what the command line asks for. Conc is the headline
// concurrency (headline: 50 when Concs has it, else its first) and Concs
// the sweep as given, one value without a sweep; results written before
// the sweep have Conc only. PostgresDSN may hold a password: results name
// the server only.
type config struct {
	Targets      []string      `json:"targets"`
	Workloads    []string      `json:"workloads"`
	Addr         string        `json:"grid_addr,omitempty"`
	GridHTTP     string        `json:"grid_http,omitempty"`
	GridNodes    int           `json:"grid_nodes"`
	GridReplicas int           `json:"grid_replicas,omitempty"`
	GridShards   int           `json:"grid_shards,omitempty"`
	GridFlags    []string      `json:"grid_flags,omitempty"`
	GridTracing  bool          `json:"grid_tracing,omitempty"`
	GridTLS      bool          `json:"grid_tls,omitempty"`
	GridBin      string        `json:"gridnode_bin,omitempty"`
	RedisAddr    string        `json:"redis_addr"`
	EtcdEPs      []string      `json:"etcd_endpoints,omitempty"`
	EtcdMembrs   int           `json:"etcd_members"`
	PostgresDSN  string        `json:"-"`
	Conc         int           `json:"concurrency"`
	Concs        []int         `json:"concurrencies,omitempty"`
	Duration     time.Duration `json:"duration_ns"`
	Rounds       int           `json:"rounds"`
	DupRatio     float64       `json:"dup_ratio"`
	Batch        int           `json:"batch"`
	Keys         int           `json:"keys"`
	KeyShape     string        `json:"key_shape"`
	Lease        time.Duration `json:"lease_ns"`
	Retention    time.Duration `json:"retention_ns"`
	Out          string        `json:"-"`
	CPUProfile   bool          `json:"cpuprofile_grid"`
	// ProfileWorkload is the workload whose first run CPUProfile profiles.
	ProfileWorkload string  `json:"cpuprofile_workload,omitempty"`
	Readme          string  `json:"-"`
	Seed            uint64  `json:"seed"`
	Rate            float64 `json:"rate,omitempty"`
	HalfPeak        bool    `json:"half_peak"`
	NoProgress      bool    `json:"-"`
	From            string  `json:"-"`
}

var allTargets = []string{"grid", "redis", "redis-durable", "etcd", "postgres"}

// defaultPostgresDSN is the PostgreSQL of --postgres-dsn.
const defaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// headlineConcurrency is the concurrency the README's table shows: 50
// callers when the sweep has them, else its first.
const headlineConcurrency = 50

// maxGridNodes bounds --grid-nodes: every node is a process on this machine.
const maxGridNodes = 9

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./bench [flags] [WORKLOAD...]\nworkloads: %s (default: all)\n", strings.Join(workload.Names, " "))
		fs.PrintDefaults()
	}
	targets := fs.String("targets", strings.Join(allTargets, ","), "targets, comma-separated: "+strings.Join(allTargets, ", "))
	fs.StringVar(&c.Addr, "addr", "", "gRPC address of a running grid node, or a cluster's nodes comma-separated (default: build and start the grid)")
	fs.StringVar(&c.GridHTTP, "grid-http", "", "HTTP address of the running node of --addr (/metrics for fill, pprof for --cpuprofile-grid)")
	fs.IntVar(&c.GridNodes, "grid-nodes", 1, "grid nodes to start; more than 1 form a cluster, measured through the routing client")
	fs.IntVar(&c.GridReplicas, "grid-replicas", 0, "cluster of --grid-nodes: replicas per shard (0: min(3, nodes))")
	fs.IntVar(&c.GridShards, "grid-shards", 0, "--shards of the started node (0: gridnode's default)")
	fs.BoolVar(&c.GridTLS, "grid-tls", false, "serve every started gridnode's client port with TLS (and, in a cluster, mutual TLS between the nodes), with certificates the benchmark makes, to measure what TLS costs")
	fs.BoolVar(&c.GridTracing, "grid-tracing", false, "trace every started gridnode: OTLP export (OTEL_EXPORTER_OTLP_ENDPOINT) to a receiver the benchmark runs, at the default sampling, to measure what tracing costs")
	gridFlags := fs.String("grid-flags", "", "more flags of every started gridnode serve, space-separated (soft settings to measure, e.g. \"--inflight-entries 2\")")
	fs.StringVar(&c.GridBin, "gridnode-bin", "", "gridnode binary to start (default: go build ./cmd/gridnode)")
	fs.StringVar(&c.RedisAddr, "redis-addr", "127.0.0.1:6379", "Redis address")
	eps := fs.String("etcd-endpoints", "", "etcd endpoints, comma-separated (default: start a throwaway etcd if etcd is on PATH)")
	fs.IntVar(&c.EtcdMembrs, "etcd-members", 1, "members of the throwaway etcd: 1 or 3")
	fs.StringVar(&c.PostgresDSN, "postgres-dsn", defaultPostgresDSN, "PostgreSQL of the postgres target (a table per cell)")
	conc := fs.String("concurrency", "50", "concurrent callers; several, comma-separated (10,50,200,800), run every closed-loop workload at each")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "duration of each run (fill runs until it has loaded --keys)")
	fs.IntVar(&c.Rounds, "rounds", 2, "rounds; each runs every workload against every target in turn")
	fs.Float64Var(&c.DupRatio, "dup-ratio", 0.5, "reserve-dup: share of reserves that repeat an already reserved key")
	fs.IntVar(&c.Batch, "batch", 100, "batch: keys per call")
	fs.IntVar(&c.Keys, "keys", 1_000_000, "fill: keys to load")
	fs.StringVar(&c.KeyShape, "key-shape", workload.ShapeUUID, "key shape: uuid or composite")
	fs.DurationVar(&c.Lease, "lease", 30*time.Second, "lease of reserves")
	fs.DurationVar(&c.Retention, "retention", time.Hour, "retention of completed keys")
	fs.StringVar(&c.Out, "out", "", "results directory (default bench/results/<date>-<host>)")
	fs.BoolVar(&c.CPUProfile, "cpuprofile-grid", false, "fetch a CPU profile of the grid node (every node of a cluster) during its first run of --cpuprofile-workload, and take one of this process (the client)")
	fs.StringVar(&c.ProfileWorkload, "cpuprofile-workload", workload.ReserveUnique, "the workload whose first run --cpuprofile-grid profiles")
	fs.StringVar(&c.Readme, "readme", "", "README to update: the Markdown table goes between <!-- bench:begin --> and <!-- bench:end -->")
	fs.Float64Var(&c.Rate, "rate", 0, "open loop: calls per second in all, latency from each call's scheduled start (0: closed loop); not for fill")
	fs.BoolVar(&c.HalfPeak, "half-peak", true, "after the closed-loop rounds, run reserve-unique open loop at half of each target's closed-loop peak, for p99 at half of peak")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of key generation (0: random)")
	fs.BoolVar(&c.NoProgress, "no-progress", false, "no progress bar")
	fs.StringVar(&c.From, "from", "", "run nothing: rewrite the tables, plots (and --readme) from this results.json, into --out or its directory")
	err := fs.Parse(args)
	if err != nil {
		return c, err
	}
	c.GridFlags = strings.Fields(*gridFlags)
	c.Targets = splitList(*targets)
	c.EtcdEPs = splitList(*eps)
	if c.Concs, err = parseConcurrencies(*conc); err != nil {
		return c, err
	}
	c.Conc = headline(c.Concs)
	c.Workloads = fs.Args()
	if len(c.Workloads) == 0 {
		c.Workloads = slices.Clone(workload.Names)
	}
	if c.Out == "" && c.From != "" {
		c.Out = filepath.Dir(c.From)
	}
	if c.Out == "" {
		host, _ := os.Hostname()
		c.Out = filepath.Join("bench", "results", time.Now().UTC().Format("2006-01-02")+"-"+host)
	}
	return c, c.validate()
}

// parseConcurrencies reads --concurrency: positive numbers, comma-separated,
// none twice.
func parseConcurrencies(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bench: --concurrency %q: want positive numbers, comma-separated", s)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("bench: --concurrency %q: %d twice", s, n)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("bench: --concurrency: none given")
	}
	return out, nil
}

// headline is the concurrency of the headline table among concs.
func headline(concs []int) int {
	if slices.Contains(concs, headlineConcurrency) || len(concs) == 0 {
		return headlineConcurrency
	}
	return concs[0]
}

// maxConc is the largest concurrency of the run: what a connection pool
// shared by its cells needs.
func (c *config) maxConc() int {
	return max(c.Conc, slices.Max(append([]int{0}, c.Concs...)))
}

// concsOf is the concurrencies workload w runs at: every one for the
// timed workloads; fill, whose figure is the memory per key, runs at the
// headline concurrency only.
func (c *config) concsOf(w string) []int {
	if w == workload.Fill {
		return []int{c.Conc}
	}
	return c.Concs
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (c *config) validate() error {
	if len(c.Targets) == 0 {
		return errors.New("bench: no targets")
	}
	for _, t := range c.Targets {
		if !slices.Contains(allTargets, t) {
			return fmt.Errorf("bench: unknown target %q (want %s)", t, strings.Join(allTargets, ", "))
		}
	}
	for _, w := range c.Workloads {
		if !slices.Contains(workload.Names, w) {
			return fmt.Errorf("bench: unknown workload %q (want %s)", w, strings.Join(workload.Names, ", "))
		}
	}
	switch {
	case c.CPUProfile && !slices.Contains(c.Workloads, c.ProfileWorkload):
		return fmt.Errorf("bench: --cpuprofile-workload %q is not among the workloads run (%s)", c.ProfileWorkload, strings.Join(c.Workloads, ", "))
	case c.GridNodes < 1 || c.GridNodes > maxGridNodes:
		return fmt.Errorf("bench: --grid-nodes must be within 1..%d", maxGridNodes)
	case c.GridReplicas < 0 || c.GridReplicas > c.GridNodes || (c.GridReplicas > 0 && c.GridNodes == 1):
		return errors.New("bench: --grid-replicas must be within 1..--grid-nodes, and needs --grid-nodes > 1")
	case c.GridNodes > 1 && c.Addr != "":
		return errors.New("bench: --grid-nodes starts a cluster; --addr uses a running grid (give a cluster's nodes comma-separated): not both")
	case c.EtcdMembrs != 1 && c.EtcdMembrs != 3:
		return errors.New("bench: --etcd-members must be 1 or 3")
	case c.Conc < 1 || c.Rounds < 1 || c.Batch < 1 || c.Keys < 1:
		return errors.New("bench: --concurrency, --rounds, --batch and --keys must be at least 1")
	case len(c.Concs) > 1 && c.Rate > 0:
		return errors.New("bench: several --concurrency values sweep closed loops; --rate runs open loop: not both")
	case c.Duration <= 0:
		return errors.New("bench: --duration must be positive")
	case c.Rate < 0:
		return errors.New("bench: --rate must not be negative")
	case c.DupRatio < 0 || c.DupRatio > 1:
		return errors.New("bench: --dup-ratio must be within 0..1")
	case c.KeyShape != workload.ShapeUUID && c.KeyShape != workload.ShapeComposite:
		return fmt.Errorf("bench: --key-shape %q: want uuid or composite", c.KeyShape)
	case c.Lease < 100*time.Millisecond || c.Lease > time.Hour:
		return errors.New("bench: --lease must be within 100ms..1h (the grid's limits)")
	case c.Retention <= 0 || c.Retention > 400*24*time.Hour:
		return errors.New("bench: --retention must be within 0..400 days")
	case c.Batch > 1000:
		return errors.New("bench: --batch at most 1000 (the grid's limit)")
	}
	return nil
}
