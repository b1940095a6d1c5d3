package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/chaos/ledger"
	"github.com/l4xg/grid/internal/machinelock"
)

// TestLedger: the ledger scenario's CI-sized runs, one per broker: 400
// payments with duplicates, consumers killed, exiting after commits,
// joining and leaving, a grid node killed and restarted, and the poisonous
// payment crashing its consumers, with the client's default attempts. No
// payment applied twice, none lost, the unpayable ones and the poisonous
// one dead-lettered, and no healthy payment (ledger.Report.Problems).
// Under the race detector the consumers (this test binary, see TestMain)
// are five times slower than in the tool's default run, and the runs hold
// the machine alone. They live in the package of the tool's own runs, so
// that go test runs both one after the other in one process instead of
// keeping a second process waiting for the machine.
func TestLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of real processes, consumers and brokers")
	}
	bin := gridnodeBin(t)
	machinelock.Exclusive(t)
	for _, broker := range ledger.Brokers() {
		t.Run(broker, func(t *testing.T) {
			cfg, err := ledger.ParseFlags([]string{"--broker", broker, "--gridnode-bin", bin,
				"--messages", "400", "--poison-every", "100", "--crash-after-commit-every", "40",
				"--timeout", "3m", "--stall", "45s"}, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = cfg.Reachable(ctx)
			cancel()
			if err != nil {
				if os.Getenv("GRID_TEST_BROKERS") == "required" {
					t.Fatal(err)
				}
				t.Skipf("%v; GRID_TEST_BROKERS=required makes this a failure", err)
			}
			rep, err := ledger.Run(context.Background(), cfg, os.Args[0], os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			ledger.PrintReport(&b, rep, false)
			t.Logf("\n%s", b.String())
			for _, p := range rep.Problems(cfg) {
				t.Error(p)
			}
		})
	}
}
