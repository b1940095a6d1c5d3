package ledger

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/sqlfence"
)

// consumerEnv, set in a child's environment, makes the program a consumer.
const consumerEnv = "LEDGER_CONSUMER"

// A consumer's exit codes that the run counts.
const (
	// exitAfterCommit: it stopped on purpose right after committing a
	// payment, before the key was completed.
	exitAfterCommit = 3
	// exitPoisonous: the poisonous payment's handler ended the process.
	exitPoisonous = 4
)

// poisonousMark starts the line a consumer writes to its stderr right
// before the poisonous payment ends it, followed by how many other
// handlers were running in the process then.
const poisonousMark = "ledger consumer: the poisonous payment crashes this consumer; handlers running beside it:"

// namespace is the grid namespace of the payments.
const namespace = "ledger"

// consumerFlags tell a consumer process what to consume and how.
type consumerFlags struct {
	broker   string
	addr     string // the broker: an AMQP URL, Kafka seed brokers, a NATS URL
	queue    string // the run's queue, topic or stream
	prefetch int
	lease    time.Duration
}

// payFunc applies the payment with body under lease l.
type payFunc func(ctx context.Context, body []byte, l client.Lease) ([]byte, error)

// consumeFunc consumes the run's payments from a broker through its
// adapter, running pay for each, until ctx ends.
type consumeFunc func(ctx context.Context, grid *client.Client, f consumerFlags, pay payFunc) error

// ConsumerMain is a consumer process: it applies the payments of the
// run's queue to the ledger through the broker's adapter and sqlfence,
// until SIGTERM.
func ConsumerMain(args []string) int {
	fs := flag.NewFlagSet("ledger consumer", flag.ContinueOnError)
	var f consumerFlags
	grid := fs.String("grid", "", "the grid's node addresses, comma-separated")
	fenceTable := fs.String("fence", "", "the fence table")
	ledgerTable := fs.String("ledger", "", "the ledger table")
	pgDSN := fs.String("postgres", "", "PostgreSQL")
	crashEvery := fs.Int("crash-after-commit-every", 0, "exit right after committing every Nth payment this process applies, before Complete (0: never)")
	fs.StringVar(&f.broker, "broker", brokerRabbitMQ, "rabbitmq, kafka or jetstream")
	fs.StringVar(&f.addr, "broker-addr", "", "the broker")
	fs.StringVar(&f.queue, "queue", "", "the run's queue, topic or stream")
	fs.IntVar(&f.prefetch, "prefetch", 32, "payments at once")
	fs.DurationVar(&f.lease, "lease", 3*time.Second, "the grid lease of a payment")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "ledger consumer %d: %s: %v\n", os.Getpid(), what, err)
		return 1
	}
	consume, ok := map[string]consumeFunc{
		brokerRabbitMQ: consumeRabbitMQ, brokerKafka: consumeKafka, brokerJetStream: consumeJetStream,
	}[f.broker]
	if !ok {
		return fail("broker", fmt.Errorf("unknown broker %q", f.broker))
	}
	c, err := client.Dial(ctx, *grid)
	if err != nil {
		return fail("grid", err)
	}
	defer c.Close()
	db, err := sql.Open("pgx", *pgDSN)
	if err != nil {
		return fail("postgres", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(f.prefetch)
	fence, err := sqlfence.New(*fenceTable)
	if err != nil {
		return fail("fence", err)
	}
	p := &payer{db: db, fence: fence, ledger: *ledgerTable, crashEvery: int64(*crashEvery), running: newRunning()}
	if err := consume(ctx, c, f, p.pay); err != nil {
		return fail("consume", err)
	}
	return 0
}

// payer applies payments to the ledger.
type payer struct {
	db         *sql.DB
	fence      *sqlfence.Fence
	ledger     string
	crashEvery int64
	applied    atomic.Int64
	running    *running
}

// pay applies one payment, fenced by the lease's token: the poisonous one
// ends the process, an unpayable one is poisoned, a payable one is
// recorded in the ledger in the transaction that records its key.
func (p *payer) pay(ctx context.Context, body []byte, l client.Lease) ([]byte, error) {
	if string(body) == poisonousBody {
		p.crash(l)
	}
	p.running.add(1)
	defer p.running.add(-1)
	if l.Attempt >= 4 {
		// Rare unless something keeps failing the key: what a payment
		// dead-lettered after its attempts went through.
		fmt.Fprintf(os.Stderr, "ledger consumer %d: %s on attempt %d (token %d)\n", os.Getpid(), l.Key, l.Attempt, l.Token)
	}
	amount, err := strconv.ParseInt(string(body), 10, 64)
	if err != nil || amount <= 0 {
		return nil, client.Poison(fmt.Errorf("unpayable amount %q", body))
	}
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	first, err := p.fence.Apply(ctx, tx, l.Namespace, l.Key, l.Token)
	if err != nil {
		return nil, err
	}
	if first {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+p.ledger+` (key, amount, token) VALUES ($1, $2, $3)`,
			l.Key, amount, strconv.FormatUint(l.Token, 10)); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	if first && p.crashEvery > 0 && p.applied.Add(1)%p.crashEvery == 0 {
		// The failure the fence is for: the payment is committed, the
		// key is not completed, and this holder is gone.
		os.Exit(exitAfterCommit)
	}
	return []byte("paid"), nil
}

// crash ends the process from inside the poisonous payment's handler, as
// a handler that brings its process down does (a segfault in a library,
// an out-of-memory kill): once another handler runs beside it, so that
// healthy payments are in flight in the process it takes down, or after
// a second without one.
func (p *payer) crash(l client.Lease) {
	beside := p.running.await(1, time.Second)
	fmt.Fprintf(os.Stderr, "%s %d (pid %d, %s on attempt %d)\n", poisonousMark, beside, os.Getpid(), l.Key, l.Attempt)
	os.Exit(exitPoisonous)
}

// running counts the payment handlers running in the process.
type running struct {
	mu      sync.Mutex
	n       int
	changed chan struct{} // closed, and replaced, at every change of n
}

func newRunning() *running { return &running{changed: make(chan struct{})} }

func (r *running) add(d int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n += d
	close(r.changed)
	r.changed = make(chan struct{})
}

// await waits until at least n handlers run, at most for timeout, and
// returns how many run.
func (r *running) await(n int, timeout time.Duration) int {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		r.mu.Lock()
		cur, changed := r.n, r.changed
		r.mu.Unlock()
		if cur >= n {
			return cur
		}
		select {
		case <-changed:
		case <-t.C:
			return cur
		}
	}
}

// IsConsumer reports whether this process was started by Run as a consumer
// (its main must then call ConsumerMain and exit with its code).
func IsConsumer() bool { return os.Getenv(consumerEnv) != "" }
