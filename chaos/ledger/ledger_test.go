package ledger

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/l4xg/grid/internal/machinelock"
)

// TestMain makes the test binary a consumer when the run starts it as one.
func TestMain(m *testing.M) {
	if os.Getenv(consumerEnv) != "" {
		os.Exit(ConsumerMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// The CI-sized run: 3,000 payments with duplicates, consumers killed and
// exiting after commits, a grid node killed and restarted; no payment
// applied twice, none lost, the unpayable ones dead-lettered as poisoned.
// It has the faults of the tool's default run (10,000 payments) on a
// third of the payments: under the race detector the consumers are five
// times slower, and the run holds the machine alone.
func TestLedger(t *testing.T) {
	cfg, err := ParseFlags([]string{"--messages", "3000", "--poison-every", "300", "--crash-after-commit-every", "150"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	requireServices(t, cfg)
	// The run loads the machine (a load of about 16 on 2 cores): no
	// timing-sensitive test runs beside it.
	machinelock.Exclusive(t)
	rep, err := Run(context.Background(), cfg, os.Args[0], os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	PrintReport(&b, rep, false)
	t.Logf("\n%s", b.String())
	if !rep.OK() {
		t.Fatalf("duplicate effects %d, lost %d", rep.DuplicateEffects, rep.Lost)
	}
	wantPoison := cfg.messages / cfg.poisonEvery
	if rep.Poisoned != wantPoison || rep.PoisonedPayable != 0 || rep.Applied != cfg.messages-wantPoison {
		t.Fatalf("applied %d, poisoned %d (%d payable); want %d and %d", rep.Applied, rep.Poisoned, rep.PoisonedPayable, cfg.messages-wantPoison, wantPoison)
	}
	if rep.DuplicatesInjected == 0 || rep.ExitsAfterCommit == 0 || rep.ConsumerKills != cfg.killConsumers || rep.GridNodeKills != 1 {
		t.Fatalf("the faults did not all happen: %+v", rep)
	}
}

// requireServices skips the test without RabbitMQ and PostgreSQL, unless
// GRID_TEST_BROKERS=required (as .ci/run sets it).
func requireServices(t *testing.T, cfg Config) {
	t.Helper()
	var why string
	if conn, err := amqp.Dial(cfg.amqpURL); err != nil {
		why = "RabbitMQ: " + err.Error()
	} else {
		conn.Close()
	}
	if db, err := sql.Open("pgx", cfg.pgDSN); err != nil || db.Ping() != nil {
		why += " PostgreSQL unreachable"
	} else {
		db.Close()
	}
	if why == "" {
		return
	}
	if os.Getenv("GRID_TEST_BROKERS") == "required" {
		t.Fatal(why)
	}
	t.Skipf("%s; GRID_TEST_BROKERS=required makes this a failure", why)
}
