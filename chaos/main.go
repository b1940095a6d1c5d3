// Command chaos is the fault-injection tool platform teams run before they
// trust the grid: it starts a cluster of real gridnode processes, drives a
// workload through the Go client while it kills, pauses, partitions,
// skews, fills, churns and crashes the nodes (all at once) on a seeded
// schedule, checks the history, and writes a report. See README.md.
//
//	go run ./chaos run --nodes 5 --duration 5m --faults all --seed 42 --out chaos-report/
//	go run ./chaos run --seed 42 --dry-run          # the schedule of a seed
//	go run ./chaos ledger                            # the end-to-end ledger scenario
//
// run exits 0 only when every check passes (1 when one fails, 2 when the
// run could not be made).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/l4xg/grid/chaos/ledger"
)

func main() {
	if ledger.IsConsumer() {
		os.Exit(ledger.ConsumerMain(os.Args[1:]))
	}
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  chaos run [flags]      a chaos run against a cluster it starts (run -h for the flags)
  chaos ledger [flags]   the end-to-end scenario: payments through RabbitMQ, Kafka or JetStream into PostgreSQL (ledger -h)
`

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		args = []string{"run"}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "run":
		cfg, err := parseRun(args[1:], stderr)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		if cfg.DryRun {
			for _, p := range plan(cfg) {
				fmt.Fprintf(stdout, "%8v  %s\n", p.At, p)
			}
			return 0
		}
		o, err := runChaos(ctx, cfg, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", err)
			return 2
		}
		verdict := "PASS"
		if !o.verdict {
			verdict = "FAIL"
		}
		fmt.Fprintf(stdout, "%s: seed %d, %d faults, report %s/report.html\n", verdict, cfg.Seed, len(o.faults), cfg.Out)
		for _, c := range o.checks {
			mark := "ok  "
			if !c.Pass {
				mark = "FAIL"
			}
			fmt.Fprintf(stdout, "  %s %-22s %s\n", mark, c.Name, c.Detail)
		}
		if !o.verdict {
			fmt.Fprintf(stdout, "replay: %s\n", replay(cfg))
			return 1
		}
		return 0
	case "ledger":
		cfg, err := ledger.ParseFlags(args[1:], stderr)
		if err != nil {
			return 2
		}
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		rep, err := ledger.Run(ctx, cfg, self, stderr)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		ledger.PrintReport(stdout, rep, cfg.JSON())
		if !rep.OK() {
			return 1
		}
		return 0
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprint(stderr, usage)
	return 2
}
