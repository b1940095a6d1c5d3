package ledger

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/rabbitmq"
	"github.com/l4xg/grid/client/sqlfence"
	amqp "github.com/rabbitmq/amqp091-go"
)

// consumerEnv, set in a child's environment, makes the program a consumer.

const consumerEnv = "LEDGER_CONSUMER"

// exitAfterCommit is a consumer's exit code when it stops on purpose right
// after committing a payment, before the key is completed.
const exitAfterCommit = 3

// namespace is the grid namespace of the payments.
const namespace = "ledger"

// retryDelays are the consumers' retry queues.
func retryDelays() []time.Duration {
	return []time.Duration{200 * time.Millisecond, time.Second, 5 * time.Second}
}

// ConsumerMain is a consumer process: it applies the payments of the queue
// to the ledger through rabbitmq.Consume and sqlfence, until SIGTERM.
func ConsumerMain(args []string) int {
	fs := flag.NewFlagSet("ledger consumer", flag.ContinueOnError)
	grid := fs.String("grid", "", "the grid's node addresses, comma-separated")
	queue := fs.String("queue", "", "the queue")
	fenceTable := fs.String("fence", "", "the fence table")
	ledgerTable := fs.String("ledger", "", "the ledger table")
	amqpURL := fs.String("amqp", "", "RabbitMQ")
	pgDSN := fs.String("postgres", "", "PostgreSQL")
	prefetch := fs.Int("prefetch", 32, "deliveries at once")
	lease := fs.Duration("lease", 3*time.Second, "the grid lease of a payment")
	crashEvery := fs.Int("crash-after-commit-every", 0, "exit right after committing every Nth payment this process applies, before Complete (0: never)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "ledger consumer %d: %s: %v\n", os.Getpid(), what, err)
		return 1
	}
	c, err := client.Dial(ctx, *grid)
	if err != nil {
		return fail("grid", err)
	}
	defer c.Close()
	conn, err := amqp.Dial(*amqpURL)
	if err != nil {
		return fail("rabbitmq", err)
	}
	defer conn.Close()
	db, err := sql.Open("pgx", *pgDSN)
	if err != nil {
		return fail("postgres", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(*prefetch)
	fence, err := sqlfence.New(*fenceTable)
	if err != nil {
		return fail("fence", err)
	}
	var applied atomic.Int64
	pay := func(ctx context.Context, d amqp.Delivery, l client.Lease) ([]byte, error) {
		amount, err := strconv.ParseInt(string(d.Body), 10, 64)
		if err != nil || amount <= 0 {
			return nil, client.Poison(fmt.Errorf("unpayable amount %q", d.Body))
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback()
		first, err := fence.Apply(ctx, tx, l.Namespace, l.Key, l.Token)
		if err != nil {
			return nil, err
		}
		if first {
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+*ledgerTable+` (key, amount, token) VALUES ($1, $2, $3)`,
				l.Key, amount, strconv.FormatUint(l.Token, 10)); err != nil {
				return nil, err
			}
		}
		if err := tx.Commit(); err != nil {
			return nil, err
		}
		if first && *crashEvery > 0 && applied.Add(1)%int64(*crashEvery) == 0 {
			// The failure the fence is for: the payment is committed, the
			// key is not completed, and this holder is gone.
			os.Exit(exitAfterCommit)
		}
		return []byte("paid"), nil
	}
	err = rabbitmq.Consume(ctx, conn, c, namespace, *queue, pay,
		rabbitmq.WithPrefetch(*prefetch), rabbitmq.WithRetryDelays(retryDelays()...), rabbitmq.WithoutDeclare(),
		rabbitmq.WithDeadLetter("", *queue+".dlq"),
		rabbitmq.WithProcessOptions(client.WithLease(*lease), client.WithMaxAttempts(50)))
	if err != nil {
		return fail("consume", err)
	}
	return 0
}

// IsConsumer reports whether this process was started by Run as a consumer
// (its main must then call ConsumerMain and exit with its code).
func IsConsumer() bool { return os.Getenv(consumerEnv) != "" }
