package ledger

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/l4xg/grid/client/sqlfence"
	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/internal/launch"
)

// Config is the run's scale and faults, from ParseFlags.
type Config struct {
	broker        string
	messages      int
	consumers     int
	killConsumers int
	joinLeave     bool
	killGridNode  bool
	poisonous     bool
	dupRatio      float64
	poisonEvery   int
	crashEvery    int
	prefetch      int
	deliveryLimit int
	ackWait       time.Duration
	lease         time.Duration
	timeout       time.Duration
	stall         time.Duration
	amqpURL       string
	natsURL       string
	pgDSN         string
	gridnodeBin   string
	seed          uint64
	json          bool
}

// ParseFlags reads the scenario's flags (defaults: the CI-sized run).
func ParseFlags(args []string, stderr io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.broker, "broker", brokerRabbitMQ, "rabbitmq, kafka (a kfake cluster started by the run) or jetstream")
	fs.IntVar(&c.messages, "messages", 10000, "payments to produce")
	fs.IntVar(&c.consumers, "consumers", 4, "consumer processes")
	fs.IntVar(&c.killConsumers, "kill-consumers", 4, "consumer processes to kill -9 during the run (each is restarted)")
	fs.BoolVar(&c.joinLeave, "join-leave", true, "start one more consumer during the run, and stop it later (SIGTERM)")
	fs.BoolVar(&c.killGridNode, "kill-grid-node", true, "kill -9 one grid node during the run, and restart it")
	fs.BoolVar(&c.poisonous, "poisonous", true, "one payment crashes every consumer process that handles it (it must end dead-lettered)")
	fs.Float64Var(&c.dupRatio, "dup-ratio", 0.1, "share of payments published twice")
	fs.IntVar(&c.poisonEvery, "poison-every", 1000, "every Nth payment has an unpayable amount and must end dead-lettered (0: none)")
	fs.IntVar(&c.crashEvery, "crash-after-commit-every", 500, "each consumer exits right after committing every Nth payment it applies, before Complete (0: never)")
	fs.IntVar(&c.prefetch, "prefetch", 32, "payments each consumer runs at once (RabbitMQ prefetch, Kafka max poll, JetStream concurrency)")
	fs.IntVar(&c.deliveryLimit, "delivery-limit", 10, "the broker's delivery budget of a message: RabbitMQ x-delivery-limit, JetStream MaxDeliver (0: none)")
	fs.DurationVar(&c.ackWait, "ack-wait", 2*time.Second, "JetStream's ack wait")
	fs.DurationVar(&c.lease, "lease", 3*time.Second, "the grid lease of a payment")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.DurationVar(&c.stall, "stall", time.Minute, "give up when neither the settled payments nor the broker's pending count move for this long")
	fs.StringVar(&c.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ")
	fs.StringVar(&c.natsURL, "nats", "nats://127.0.0.1:4222", "NATS with JetStream")
	fs.StringVar(&c.pgDSN, "postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL")
	fs.StringVar(&c.gridnodeBin, "gridnode-bin", "", "a gridnode binary (default: build one from this module)")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the duplicates and the fault schedule (0: random)")
	fs.BoolVar(&c.json, "json", false, "print one JSON object instead of a table")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case !slices.Contains([]string{brokerRabbitMQ, brokerKafka, brokerJetStream}, c.broker):
		return c, fmt.Errorf("ledger: --broker %q: want rabbitmq, kafka or jetstream", c.broker)
	case c.messages < 3, c.consumers < 1, c.prefetch < 1:
		return c, errors.New("ledger: --messages must be at least 3, --consumers and --prefetch at least 1")
	case c.dupRatio < 0 || c.dupRatio > 1:
		return c, fmt.Errorf("ledger: --dup-ratio %v is outside [0, 1]", c.dupRatio)
	case c.deliveryLimit < 0 || c.ackWait <= 0 || c.lease <= 0 || c.stall <= 0:
		return c, errors.New("ledger: --delivery-limit must be at least 0, --ack-wait, --lease and --stall more than 0")
	}
	if c.seed == 0 {
		c.seed = rand.Uint64()
	}
	return c, nil
}

// JSON reports whether --json asked for one JSON object.
func (c Config) JSON() bool { return c.json }

// Run runs the scenario; self is the program to start consumers with: it
// is started with IsConsumer true in its environment and must then run
// ConsumerMain.
func Run(ctx context.Context, cfg Config, self string, log io.Writer) (Report, error) {
	rep := Report{Broker: cfg.broker, Produced: cfg.messages, Seed: cfg.seed, PoisonReasons: map[string]int{}}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	start := time.Now()
	log = newStamped(log, start)
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))
	k := newKinds(cfg)

	// Infrastructure: PostgreSQL tables, the broker's queues, a 3-node grid.
	id := fmt.Sprintf("%x", rng.Uint32())
	db, err := openLedger(ctx, cfg.pgDSN, id)
	if err != nil {
		return rep, err
	}
	defer db.close()
	b, err := openBroker(ctx, cfg, "ledger-"+id, log)
	if err != nil {
		return rep, err
	}
	defer b.close()
	cluster, stopGrid, err := startGrid(ctx, cfg.gridnodeBin, log)
	defer stopGrid()
	if err != nil {
		return rep, err
	}

	// Consumers, each restarted whenever it ends until the run is over.
	args := append([]string{"--grid", cluster.Addrs(), "--fence", db.fence, "--ledger", db.ledger,
		"--postgres", cfg.pgDSN, "--broker", cfg.broker,
		"--prefetch", strconv.Itoa(cfg.prefetch), "--lease", cfg.lease.String(),
		"--crash-after-commit-every", strconv.Itoa(cfg.crashEvery)}, b.consumerArgs()...)
	fleet := newFleet(self, args, cfg.consumers, log)
	defer fleet.stop()

	// The producer, then the faults, scheduled by progress.
	ps, dups := schedule(k, cfg.dupRatio, rng)
	fmt.Fprintf(log, "ledger: publishing %d payments (%d of them twice) to %s\n", cfg.messages, dups, cfg.broker)
	if err := b.publish(ctx, ps); err != nil {
		return rep, err
	}
	rep.DuplicatesInjected = dups
	t := newTally()
	f := newFaults(cfg, rng, cluster, fleet, &rep, log)
	if rep.Unfinished, err = watch(ctx, cfg, db, b, t, f, log); err != nil {
		return rep, err
	}
	fleet.stop()
	rep.ExitsAfterCommit = fleet.exited(exitAfterCommit)
	rep.Seconds = time.Since(start).Seconds()
	return rep, finish(k, db, b, t, fleet, &rep)
}

// finish reads the ledger and the last dead letters once the consumers
// have stopped, and judges.
func finish(k kinds, db *ledgerDB, b broker, t *tally, fleet *fleet, rep *Report) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dls, err := b.deadLetters(ctx)
	if err != nil {
		return err
	}
	t.add(dls)
	applied, err := db.appliedKeys(ctx)
	if err != nil {
		return err
	}
	if rep.DuplicateEffects, err = db.count(ctx, `SELECT count(*) FROM (SELECT key FROM `+db.ledger+` GROUP BY key HAVING count(*) > 1) AS twice`); err != nil {
		return err
	}
	rep.judge(k, applied, t)
	if rep.Poisonous != nil {
		rep.Poisonous.Crashes = fleet.exited(exitPoisonous)
		rep.Poisonous.Beside = fleet.poisonousCrashes()
	}
	return nil
}

// watch follows the run until every payment is applied or set aside, the
// broker holds nothing more and every fault has happened; or until
// nothing moved for cfg.stall, or ctx ends: it then says why the run is
// unfinished. It injects the faults as the payments settle.
func watch(ctx context.Context, cfg Config, db *ledgerDB, b broker, t *tally, f *faults, log io.Writer) (unfinished string, err error) {
	lastMove, lastLog := time.Now(), time.Now()
	var lastSettled, lastPending int
	timedOut := func(err error) (string, error) {
		if ctx.Err() != nil {
			fmt.Fprintf(log, "ledger: gave up after %v: %v\n", cfg.timeout, err)
			return fmt.Sprintf("timed out after %v", cfg.timeout), nil
		}
		return "", err
	}
	for {
		dls, err := b.deadLetters(ctx)
		if err != nil {
			return timedOut(err)
		}
		t.add(dls)
		applied, err := db.count(ctx, `SELECT count(DISTINCT key) FROM `+db.ledger)
		if err != nil {
			return timedOut(err)
		}
		aside := t.setAside()
		appliedAside, err := db.appliedAmong(ctx, aside)
		if err != nil {
			return timedOut(err)
		}
		settled := applied + len(aside) - appliedAside
		if err := f.step(ctx, float64(settled)/float64(cfg.messages)); err != nil {
			return timedOut(err)
		}
		pending, err := b.pending(ctx)
		if err != nil {
			return timedOut(err)
		}
		if settled >= cfg.messages && pending == 0 && f.done() {
			return "", nil
		}
		if settled != lastSettled || pending != lastPending {
			lastSettled, lastPending, lastMove = settled, pending, time.Now()
		}
		if time.Since(lastLog) >= 5*time.Second {
			fmt.Fprintf(log, "ledger: %d of %d payments settled (%d applied), %d pending in the broker\n", settled, cfg.messages, applied, pending)
			lastLog = time.Now()
		}
		if time.Since(lastMove) >= cfg.stall {
			fmt.Fprintf(log, "ledger: stalled for %v: %d of %d payments settled, %d pending\n", cfg.stall, settled, cfg.messages, pending)
			return fmt.Sprintf("stalled: nothing moved for %v", cfg.stall), nil
		}
		select {
		case <-ctx.Done():
			return timedOut(fmt.Errorf("%d of %d payments settled, %d pending", settled, cfg.messages, pending))
		case <-time.After(250 * time.Millisecond): // polling the ledger's progress
		}
	}
}

// startGrid starts a 3-node grid of bin, or of a gridnode built from this
// module when bin is empty, and returns how to stop it and remove what it
// made (also when it fails).
func startGrid(ctx context.Context, bin string, log io.Writer) (*launch.GridCluster, func(), error) {
	var cleanup []func()
	stop := func() {
		for _, c := range slices.Backward(cleanup) {
			c()
		}
	}
	if bin == "" {
		dir, err := os.MkdirTemp("", "ledger-gridnode-")
		if err != nil {
			return nil, stop, err
		}
		cleanup = append(cleanup, func() { os.RemoveAll(dir) })
		fmt.Fprintln(log, "ledger: building gridnode")
		if bin, err = gridproc.BuildGridnode(ctx, "", dir); err != nil {
			return nil, stop, err
		}
	}
	fmt.Fprintln(log, "ledger: starting a 3-node grid")
	cluster, err := launch.StartGridCluster(ctx, launch.GridClusterOptions{Bin: bin, Nodes: 3})
	if err != nil {
		return nil, stop, err
	}
	cleanup = append(cleanup, cluster.Stop)
	return cluster, stop, nil
}

// ledgerDB is the run's two tables: the fence and the ledger.
type ledgerDB struct {
	db     *sql.DB
	fence  string
	ledger string
}

func openLedger(ctx context.Context, dsn, id string) (*ledgerDB, error) {
	db, err := sql.Open("pgx", dsn)
	if err == nil {
		err = db.PingContext(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: PostgreSQL at %s: %w", dsn, err)
	}
	l := &ledgerDB{db: db, fence: "ledger_fence_" + id, ledger: "ledger_" + id}
	fence, err := sqlfence.New(l.fence)
	if err != nil {
		db.Close()
		return nil, err
	}
	for _, stmt := range []string{fence.Schema(),
		`CREATE TABLE ` + l.ledger + ` (key TEXT NOT NULL, amount BIGINT NOT NULL, token NUMERIC(20,0) NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			l.close()
			return nil, fmt.Errorf("ledger: create tables: %w", err)
		}
	}
	return l, nil
}

// appliedKeys are the keys the ledger holds.
func (l *ledgerDB) appliedKeys(ctx context.Context) (map[string]bool, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT DISTINCT key FROM `+l.ledger)
	if err != nil {
		return nil, fmt.Errorf("ledger: read the ledger: %w", err)
	}
	defer rows.Close()
	keys := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys[k] = true
	}
	return keys, rows.Err()
}

// appliedAmong is how many of keys the ledger holds.
func (l *ledgerDB) appliedAmong(ctx context.Context, keys []string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	var n int
	if err := l.db.QueryRowContext(ctx, `SELECT count(DISTINCT key) FROM `+l.ledger+` WHERE key = ANY($1)`, keys).Scan(&n); err != nil {
		return 0, fmt.Errorf("ledger: read the ledger: %w", err)
	}
	return n, nil
}

func (l *ledgerDB) count(ctx context.Context, query string) (int, error) {
	var n int
	if err := l.db.QueryRowContext(ctx, query).Scan(&n); err != nil {
		return 0, fmt.Errorf("ledger: %s: %w", query, err)
	}
	return n, nil
}

func (l *ledgerDB) close() {
	for _, t := range []string{l.fence, l.ledger} {
		_, _ = l.db.Exec(`DROP TABLE IF EXISTS ` + t)
	}
	l.db.Close()
}
