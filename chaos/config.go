package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/l4xg/grid/client"
)

// The faults the tool injects.
const (
	faultKill      = "kill"
	faultPause     = "pause"
	faultPartition = "partition"
	faultSkew      = "skew"
	faultDisk      = "disk"
	faultChurn     = "churn"
	faultRestart   = "restart"
)

var allFaults = []string{faultKill, faultPause, faultPartition, faultSkew, faultDisk, faultChurn, faultRestart}

// The deliberately broken grids of --broken (check.StaleGets and others).
var brokenModes = []string{"stale-gets", "lost-completes", "follower-reads"}

// maxNodes is the most nodes a cluster holds (cluster/topology.MaxNodes).
const maxNodes = 5

// config is one run's settings.
type config struct {
	Nodes, Replicas, Shards int
	Duration                time.Duration
	Faults                  []string
	FaultEvery              time.Duration // mean time between fault starts
	Workload                string        // register, app or mixed
	Seed                    uint64
	Out                     string
	Bin                     string
	Workers                 int // register workload callers
	Keys                    int // register keys per epoch
	Epoch                   time.Duration
	Rate                    float64 // register operations per second, all workers
	AppWorkers              int
	MaxOffset               time.Duration
	Grace                   time.Duration
	DiskSize                int64
	Broken                  string
	Progress                bool
	CheckTimeout            time.Duration
	DryRun                  bool
	NodeLogLevel            string // the nodes' --log-level
}

func (c config) has(f string) bool { return slices.Contains(c.Faults, f) }

// needsLab: partitions need network namespaces.
func (c config) needsLab() bool { return c.has(faultPartition) }

func (c config) register() bool { return c.Workload != "app" }
func (c config) app() bool      { return c.Workload != "register" }

// Register workload durations: leases of 0.5 to 3 s that pauses outlast,
// retry delays below a second, retentions of 1 to 6 s, so that takeovers,
// retries and the end of retention happen in real time.
const (
	leaseMin, leaseSpan         = 500, 2500
	retentionMin, retentionSpan = 1000, 5000
	retryMin, retrySpan         = 100, 500
	maxLease                    = time.Duration(leaseMin+leaseSpan) * time.Millisecond
)

// parseRun reads the flags of "run".
func parseRun(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("chaos run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	faults := fs.String("faults", "kill,pause,partition,skew", "faults to inject, comma-separated, from "+strings.Join(allFaults, ",")+" (or all)")
	fs.IntVar(&c.Nodes, "nodes", 3, "gridnode processes (3..5)")
	fs.IntVar(&c.Replicas, "replicas", 3, "replicas per shard")
	fs.IntVar(&c.Shards, "shards", 0, "shards (0: one per node, --nodes, so that every node leads one and a spare that joins takes replicas from the others; gridnode's own default for a new cluster is as few as give each founding node one replica)")
	fs.DurationVar(&c.Duration, "duration", time.Minute, "how long the load runs under faults")
	fs.DurationVar(&c.FaultEvery, "fault-every", 12*time.Second, "mean time from one fault's start to the next's")
	fs.StringVar(&c.Workload, "workload", "mixed", "register (the checked register workload), app (consumers: Process, batches, duplicates, crashing handlers) or mixed")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of the fault schedule and the workload's choices (0: from the time; printed)")
	fs.StringVar(&c.Out, "out", "chaos-report", "directory for the report, the history and the nodes' logs")
	fs.StringVar(&c.Bin, "gridnode-bin", "", "a gridnode binary (default: build one from this module)")
	fs.IntVar(&c.Workers, "workers", 6, "callers of the register workload")
	fs.IntVar(&c.Keys, "keys", 5, "keys of the register workload at a time")
	fs.DurationVar(&c.Epoch, "key-epoch", 20*time.Second, "the register workload moves to new keys this often (keeps each key's history small)")
	fs.Float64Var(&c.Rate, "rate", 300, "register operations per second, all callers together")
	fs.IntVar(&c.AppWorkers, "app-workers", 8, "consumers of the app workload")
	fs.DurationVar(&c.MaxOffset, "max-clock-offset", 250*time.Millisecond, "the nodes' --max-clock-offset; skews stay within half of it, but for skews behind that a leader must refuse")
	fs.DurationVar(&c.Grace, "grace-period", 30*time.Second, "the nodes' --grace-period")
	fs.Int64Var(&c.DiskSize, "disk-size", 1<<30, "bytes of each node's tmpfs data directory (disk faults)")
	fs.StringVar(&c.Broken, "broken", "", "check the checker: run through a deliberately broken grid ("+strings.Join(brokenModes, ", ")+"); the verdict must then fail")
	fs.BoolVar(&c.Progress, "progress", isTerminal(os.Stderr), "print a progress line while running (default: when stderr is a terminal; otherwise a line every 10 s)")
	fs.DurationVar(&c.CheckTimeout, "check-timeout", 5*time.Minute, "bound on the linearizability check")
	fs.BoolVar(&c.DryRun, "dry-run", false, "print the fault schedule of the seed and exit")
	fs.StringVar(&c.NodeLogLevel, "node-log-level", "warn", "the nodes' --log-level (debug, info, warn or error); info shows the control leader's moves and leadership hand-backs in the nodes' logs")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("chaos run: unexpected arguments %q", fs.Args())
	}
	if *faults == "all" {
		c.Faults = allFaults
	} else if *faults != "" && *faults != "none" {
		for _, f := range strings.Split(*faults, ",") {
			f = strings.TrimSpace(f)
			if !slices.Contains(allFaults, f) {
				return c, fmt.Errorf("chaos run: --faults: unknown fault %q (known: %s)", f, strings.Join(allFaults, ", "))
			}
			if !slices.Contains(c.Faults, f) {
				c.Faults = append(c.Faults, f)
			}
		}
	}
	switch {
	case c.Nodes < 3 || c.Nodes > maxNodes:
		return c, fmt.Errorf("chaos run: --nodes %d out of range 3..%d", c.Nodes, maxNodes)
	case c.Replicas < 1 || c.Replicas > c.Nodes:
		return c, fmt.Errorf("chaos run: --replicas %d out of range 1..--nodes", c.Replicas)
	case c.Shards < 0:
		return c, errors.New("chaos run: --shards must not be negative")
	case c.Duration < 10*time.Second:
		return c, fmt.Errorf("chaos run: --duration %v below 10s", c.Duration)
	case c.FaultEvery < time.Second:
		return c, errors.New("chaos run: --fault-every must be at least 1s")
	case c.Workload != "register" && c.Workload != "app" && c.Workload != "mixed":
		return c, fmt.Errorf("chaos run: --workload %q: register, app or mixed", c.Workload)
	case c.Workers < 1 || c.Keys < 1 || c.AppWorkers < 1 || c.Rate <= 0:
		return c, errors.New("chaos run: --workers, --keys, --app-workers and --rate must be positive")
	case c.Broken != "" && !slices.Contains(brokenModes, c.Broken):
		return c, fmt.Errorf("chaos run: --broken %q: one of %s", c.Broken, strings.Join(brokenModes, ", "))
	case c.Broken != "" && !c.register():
		return c, errors.New("chaos run: --broken needs the register workload (the one porcupine checks)")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.NodeLogLevel)); err != nil {
		return c, fmt.Errorf("chaos run: --node-log-level: %v", err)
	}
	if m := client.DefaultLeaseMargin(time.Duration(leaseMin) * time.Millisecond); c.MaxOffset <= 0 || c.MaxOffset > m {
		return c, fmt.Errorf("chaos run: --max-clock-offset %v out of range: above 0 and at most %v, the margin of the workload's shortest lease", c.MaxOffset, m)
	}
	if c.Shards == 0 {
		c.Shards = c.Nodes
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64() >> 1
	}
	return c, nil
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
