package ledger

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/internal/machinelock"
)

// TestMain makes the test binary a consumer when the run starts it as one.
func TestMain(m *testing.M) {
	if os.Getenv(consumerEnv) != "" {
		os.Exit(ConsumerMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// The CI-sized runs, one per broker: 400 payments with duplicates,
// consumers killed, exiting after commits, joining and leaving, a grid
// node killed and restarted, and the poisonous payment crashing its
// consumers, with the client's default attempts. No payment applied twice,
// none lost, the unpayable ones and the poisonous one dead-lettered, and
// no healthy payment. Under the race detector the consumers are five
// times slower than in the tool's default run, so the runs hold the
// machine alone; they run side by side (as many at once as -parallel
// lets), since each spends most of its time waiting on leases, session
// timeouts and crash loops rather than on the CPU.
func TestLedger(t *testing.T) {
	base, err := ParseFlags(nil, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	requirePostgres(t, base)
	machinelock.Exclusive(t)
	bin, err := gridproc.BuildGridnode(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, broker := range []string{brokerRabbitMQ, brokerKafka, brokerJetStream} {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			cfg, err := ParseFlags([]string{"--broker", broker, "--gridnode-bin", bin,
				"--messages", "400", "--poison-every", "100", "--crash-after-commit-every", "40",
				"--timeout", "3m", "--stall", "45s"}, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			requireBroker(t, cfg)
			rep, err := Run(context.Background(), cfg, os.Args[0], os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, cfg, rep)
		})
	}
}

func checkReport(t *testing.T, cfg Config, rep Report) {
	t.Helper()
	var b strings.Builder
	PrintReport(&b, rep, false)
	t.Logf("\n%s", b.String())
	if rep.Unfinished != "" {
		t.Errorf("the run did not finish: %s", rep.Unfinished)
	}
	if rep.DuplicateEffects != 0 || rep.Lost != 0 {
		t.Errorf("duplicate effects %d, lost %d", rep.DuplicateEffects, rep.Lost)
	}
	if rep.PoisonedPayable != 0 {
		t.Errorf("%d healthy payments dead-lettered (%d of them applied before), the first %v: the poisonous payment's crash loop poisoned payments in flight beside it",
			rep.PoisonedPayable, rep.HealthyDeadLetteredApplied, rep.HealthyDeadLettered)
	}
	if rep.UnpayableNotDeadLettered != 0 || rep.Poisonous == nil || rep.Poisonous.Fate != fateDeadLettered {
		t.Errorf("unpayable payments not dead-lettered %d; the poisonous payment: %+v", rep.UnpayableNotDeadLettered, rep.Poisonous)
	}
	if want := cfg.messages / cfg.poisonEvery; rep.Poisoned-rep.PoisonedPayable != want+1 {
		t.Errorf("dead-lettered %d payments, %d of them healthy; want the %d unpayable and the poisonous one", rep.Poisoned, rep.PoisonedPayable, want)
	}
	if rep.DuplicatesInjected == 0 || rep.ExitsAfterCommit == 0 || rep.ConsumerKills != cfg.killConsumers || rep.GridNodeKills != 1 ||
		rep.ConsumerJoins != 1 || rep.ConsumerLeaves != 1 || rep.Poisonous == nil || rep.Poisonous.Crashes == 0 {
		t.Errorf("the faults did not all happen: %+v", rep)
	}
	if !rep.OK() && !t.Failed() {
		t.Errorf("the verdict is FAIL for a reason this test does not name: %+v", rep)
	}
}

// requirePostgres skips the test without PostgreSQL, unless
// GRID_TEST_BROKERS=required (as .ci/run sets it).
func requirePostgres(t *testing.T, cfg Config) {
	t.Helper()
	db, err := sql.Open("pgx", cfg.pgDSN)
	if err == nil {
		err = db.Ping()
		db.Close()
	}
	if err != nil {
		skipOrFail(t, "PostgreSQL at "+cfg.pgDSN+": "+err.Error())
	}
}

// requireBroker skips the run without its broker (RabbitMQ, or NATS with
// JetStream; Kafka is kfake, in this process), unless
// GRID_TEST_BROKERS=required.
func requireBroker(t *testing.T, cfg Config) {
	t.Helper()
	switch cfg.broker {
	case brokerRabbitMQ:
		conn, err := amqp.Dial(cfg.amqpURL)
		if err != nil {
			skipOrFail(t, "RabbitMQ at "+cfg.amqpURL+": "+err.Error())
			return
		}
		conn.Close()
	case brokerJetStream:
		nc, err := nats.Connect(cfg.natsURL)
		if err != nil {
			skipOrFail(t, "NATS at "+cfg.natsURL+": "+err.Error())
			return
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err == nil {
			_, err = js.AccountInfo(context.Background())
		}
		if err != nil {
			skipOrFail(t, "JetStream at "+cfg.natsURL+": "+err.Error())
		}
	}
}

func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("GRID_TEST_BROKERS") == "required" {
		t.Fatal(why)
	}
	t.Skipf("%s; GRID_TEST_BROKERS=required makes this a failure", why)
}
