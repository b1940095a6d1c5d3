// Package ledger is the end-to-end scenario of the chaos tool, the run that
// shows what the grid is for.
// A producer publishes payments to RabbitMQ and injects duplicates; consumer
// processes apply them to a PostgreSQL ledger through client/rabbitmq and
// client/sqlfence, recording each payment under its key and fencing token
// in the transaction that moves the money; meanwhile consumers are killed
// with kill -9, consumers exit on purpose right after a commit and before
// Complete, and one node of a 3-node grid is killed and restarted. At the end
// the ledger is compared with what was produced:
//
//	go run ./chaos ledger                      # 10,000 payments, the faults on
//	go run ./chaos ledger --messages 1000000   # the long run
//	go run ./chaos ledger --json               # one JSON object
//
// It exits non-zero unless no payment was applied twice (duplicate_effects)
// and none was lost. It needs the RabbitMQ (guest/guest) and PostgreSQL
// (database test, trust auth) servers named by --amqp and --postgres, and
// builds gridnode from this module unless --gridnode-bin names one.
package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/l4xg/grid/client/rabbitmq"
	"github.com/l4xg/grid/client/sqlfence"
	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/internal/launch"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Config is the run's scale and faults, from ParseFlags.
type Config struct {
	messages      int
	consumers     int
	killConsumers int
	killGridNode  bool
	dupRatio      float64
	poisonEvery   int
	crashEvery    int
	prefetch      int
	lease         time.Duration
	timeout       time.Duration
	amqpURL       string
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
	fs.IntVar(&c.messages, "messages", 10000, "payments to produce")
	fs.IntVar(&c.consumers, "consumers", 4, "consumer processes")
	fs.IntVar(&c.killConsumers, "kill-consumers", 4, "consumer processes to kill -9 during the run (each is restarted)")
	fs.BoolVar(&c.killGridNode, "kill-grid-node", true, "kill -9 one grid node during the run, and restart it")
	fs.Float64Var(&c.dupRatio, "dup-ratio", 0.1, "share of payments published twice")
	fs.IntVar(&c.poisonEvery, "poison-every", 1000, "every Nth payment has an unpayable amount and must end dead-lettered (0: none)")
	fs.IntVar(&c.crashEvery, "crash-after-commit-every", 500, "each consumer exits right after committing every Nth payment it applies, before Complete (0: never)")
	fs.IntVar(&c.prefetch, "prefetch", 32, "deliveries each consumer runs at once")
	fs.DurationVar(&c.lease, "lease", 3*time.Second, "the grid lease of a payment")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.StringVar(&c.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ")
	fs.StringVar(&c.pgDSN, "postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL")
	fs.StringVar(&c.gridnodeBin, "gridnode-bin", "", "a gridnode binary (default: build one from this module)")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the duplicates and the fault schedule (0: random)")
	fs.BoolVar(&c.json, "json", false, "print one JSON object instead of a table")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.messages < 1, c.consumers < 1, c.prefetch < 1:
		return c, errors.New("ledger: --messages, --consumers and --prefetch must be at least 1")
	case c.dupRatio < 0 || c.dupRatio > 1:
		return c, fmt.Errorf("ledger: --dup-ratio %v is outside [0, 1]", c.dupRatio)
	}
	if c.seed == 0 {
		c.seed = rand.Uint64()
	}
	return c, nil
}

// Report is what the run found.
type Report struct {
	Produced           int            `json:"produced"`
	DuplicatesInjected int            `json:"duplicates_injected"`
	Applied            int            `json:"applied"`
	DuplicateEffects   int            `json:"duplicate_effects"`
	Lost               int            `json:"lost"`
	Poisoned           int            `json:"poisoned"`
	PoisonReasons      map[string]int `json:"poison_reasons"`
	// PoisonedPayable are dead-lettered payments that were payable: they
	// count as lost too.
	PoisonedPayable  int     `json:"poisoned_payable"`
	DeadLettered     int     `json:"dead_lettered"`
	ConsumerKills    int     `json:"consumer_kills"`
	ExitsAfterCommit int     `json:"exits_after_commit"`
	GridNodeKills    int     `json:"grid_node_kills"`
	Seconds          float64 `json:"seconds"`
	Seed             uint64  `json:"seed"`
}

// OK is the verdict: no payment applied twice, none lost.
func (r Report) OK() bool { return r.DuplicateEffects == 0 && r.Lost == 0 }

// PrintReport writes r as a table, or as one JSON object.
func PrintReport(w io.Writer, r Report, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintln(w, string(b))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "payments produced\t%d\n", r.Produced)
	fmt.Fprintf(tw, "duplicates injected (published twice)\t%d\n", r.DuplicatesInjected)
	fmt.Fprintf(tw, "payments applied\t%d\n", r.Applied)
	fmt.Fprintf(tw, "duplicate effects (applied twice)\t%d\n", r.DuplicateEffects)
	fmt.Fprintf(tw, "lost (produced, payable, never applied)\t%d\n", r.Lost)
	fmt.Fprintf(tw, "poisoned (dead-lettered payments)\t%d\n", r.Poisoned)
	reasons := make([]string, 0, len(r.PoisonReasons))
	for reason := range r.PoisonReasons {
		reasons = append(reasons, reason)
	}
	sort.Strings(reasons)
	for _, reason := range reasons {
		fmt.Fprintf(tw, "  %s\t%d\n", reason, r.PoisonReasons[reason])
	}
	fmt.Fprintf(tw, "  of them payable (counted as lost)\t%d\n", r.PoisonedPayable)
	fmt.Fprintf(tw, "dead letters (copies included)\t%d\n", r.DeadLettered)
	fmt.Fprintf(tw, "consumers killed (kill -9)\t%d\n", r.ConsumerKills)
	fmt.Fprintf(tw, "consumers exited after a commit, before Complete\t%d\n", r.ExitsAfterCommit)
	fmt.Fprintf(tw, "grid nodes killed (kill -9) and restarted\t%d\n", r.GridNodeKills)
	fmt.Fprintf(tw, "seconds\t%.1f\n", r.Seconds)
	fmt.Fprintf(tw, "seed\t%d\n", r.Seed)
	verdict := "PASS: no payment applied twice, none lost"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(tw, "verdict\t%s\n", verdict)
	tw.Flush()
}

// Run runs the scenario; self is the program to start consumers with: it
// is started with IsConsumer true in its environment and must then run
// ConsumerMain.
func Run(ctx context.Context, cfg Config, self string, log io.Writer) (Report, error) {
	rep := Report{Produced: cfg.messages, Seed: cfg.seed, PoisonReasons: map[string]int{}}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	start := time.Now()
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))

	// Infrastructure: PostgreSQL tables, RabbitMQ queues, a 3-node grid.
	id := fmt.Sprintf("%x", rng.Uint32())
	db, err := sql.Open("pgx", cfg.pgDSN)
	if err == nil {
		err = db.PingContext(ctx)
	}
	if err != nil {
		return rep, fmt.Errorf("ledger: PostgreSQL at %s: %w", cfg.pgDSN, err)
	}
	defer db.Close()
	fence, err := sqlfence.New("ledger_fence_" + id)
	if err != nil {
		return rep, err
	}
	ledgerTable := "ledger_" + id
	for _, stmt := range []string{fence.Schema(),
		`CREATE TABLE ` + ledgerTable + ` (key TEXT NOT NULL, amount BIGINT NOT NULL, token NUMERIC(20,0) NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return rep, fmt.Errorf("ledger: create tables: %w", err)
		}
	}
	defer func() {
		for _, t := range []string{"ledger_fence_" + id, ledgerTable} {
			_, _ = db.Exec(`DROP TABLE IF EXISTS ` + t)
		}
	}()
	conn, err := amqp.Dial(cfg.amqpURL)
	if err != nil {
		return rep, fmt.Errorf("ledger: RabbitMQ at %s: %w", cfg.amqpURL, err)
	}
	defer conn.Close()
	queue := "ledger-" + id
	if err := declareQueues(conn, queue); err != nil {
		return rep, err
	}
	defer deleteQueues(cfg.amqpURL, queue)
	bin := cfg.gridnodeBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "ledger-gridnode-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(log, "ledger: building gridnode")
		if bin, err = gridproc.BuildGridnode(ctx, "", dir); err != nil {
			return rep, err
		}
	}
	fmt.Fprintln(log, "ledger: starting a 3-node grid")
	cluster, err := launch.StartGridCluster(ctx, launch.GridClusterOptions{Bin: bin, Nodes: 3})
	if err != nil {
		return rep, err
	}
	defer cluster.Stop()

	// Consumers, each restarted whenever it ends until the run is over.
	args := []string{"--grid", cluster.Addrs(), "--queue", queue, "--fence", "ledger_fence_" + id,
		"--ledger", ledgerTable, "--amqp", cfg.amqpURL, "--postgres", cfg.pgDSN,
		"--prefetch", strconv.Itoa(cfg.prefetch), "--lease", cfg.lease.String(),
		"--crash-after-commit-every", strconv.Itoa(cfg.crashEvery)}
	fleet := newFleet(self, args, cfg.consumers, log)
	defer fleet.stop()

	// The producer, then the faults, scheduled by progress.
	fmt.Fprintf(log, "ledger: publishing %d payments\n", cfg.messages)
	dups, err := produce(ctx, conn, queue, cfg, rng)
	if err != nil {
		return rep, err
	}
	rep.DuplicatesInjected = dups
	poisonByDesign := 0
	if cfg.poisonEvery > 0 {
		poisonByDesign = cfg.messages / cfg.poisonEvery
	}
	var applied int
	consumerKills := make([]float64, cfg.killConsumers)
	for i := range consumerKills {
		consumerKills[i] = 0.1 + 0.6*float64(i)/float64(max(1, cfg.killConsumers))
	}
	gridKilled, gridRestarted := !cfg.killGridNode, !cfg.killGridNode
	var gridKilledAt time.Time
	victim := cluster.Nodes[1+rng.IntN(len(cluster.Nodes)-1)]
loop:
	for {
		if applied, err = count(ctx, db, `SELECT count(DISTINCT key) FROM `+ledgerTable); err != nil {
			return rep, err
		}
		progress := float64(applied) / float64(cfg.messages-poisonByDesign)
		for len(consumerKills) > 0 && progress >= consumerKills[0] {
			consumerKills = consumerKills[1:]
			fleet.kill(rng.IntN(cfg.consumers))
			rep.ConsumerKills++
		}
		if !gridKilled && progress >= 0.3 {
			fmt.Fprintf(log, "ledger: kill -9 grid node %s\n", victim.ID)
			victim.Kill()
			gridKilled, gridKilledAt = true, time.Now()
			rep.GridNodeKills++
		}
		if gridKilled && !gridRestarted && time.Since(gridKilledAt) >= 3*time.Second {
			fmt.Fprintf(log, "ledger: restart grid node %s\n", victim.ID)
			if err := victim.Restart(ctx); err != nil {
				return rep, err
			}
			gridRestarted = true
		}
		dead, err := queueDepth(conn, queue+".dlq")
		if err != nil {
			return rep, err
		}
		pending, err := pendingMessages(conn, queue)
		if err != nil {
			return rep, err
		}
		if applied+poisonByDesign >= cfg.messages && dead >= poisonByDesign && pending == 0 && gridRestarted && len(consumerKills) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(log, "ledger: gave up after %v: %d applied, %d messages pending\n", cfg.timeout, applied, pending)
			break loop
		case <-time.After(100 * time.Millisecond): // polling the ledger's progress
		}
	}
	fleet.stop()
	rep.ExitsAfterCommit = fleet.exitsAfterCommit()
	rep.Seconds = time.Since(start).Seconds()
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if rep.Applied, err = count(cctx, db, `SELECT count(DISTINCT key) FROM `+ledgerTable); err != nil {
		return rep, err
	}
	if rep.DuplicateEffects, err = count(cctx, db, `SELECT count(*) FROM (SELECT key FROM `+ledgerTable+` GROUP BY key HAVING count(*) > 1) AS twice`); err != nil {
		return rep, err
	}
	poisoned, copies, err := drainDeadLetters(conn, queue+".dlq")
	if err != nil {
		return rep, err
	}
	rep.DeadLettered = copies
	for key, reason := range poisoned {
		rep.PoisonReasons[reason]++
		if !isPoisonByDesign(key, cfg.poisonEvery) {
			rep.PoisonedPayable++
		}
	}
	rep.Poisoned = len(poisoned)
	rep.Lost = cfg.messages - poisonByDesign - rep.Applied
	return rep, nil
}

// paymentKey is the i-th payment's key (its message id).
func paymentKey(i int) string { return fmt.Sprintf("pay-%07d", i) }

// isPoisonByDesign reports whether the payment with key is one produced
// with an unpayable amount.
func isPoisonByDesign(key string, every int) bool {
	i, err := strconv.Atoi(strings.TrimPrefix(key, "pay-"))
	return err == nil && every > 0 && (i+1)%every == 0
}

// produce publishes the payments, with publisher confirms, and publishes
// a share of them a second time at a later point. It returns the number of
// copies published twice.
func produce(ctx context.Context, conn *amqp.Connection, queue string, cfg Config, rng *rand.Rand) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	order := make([]int, 0, cfg.messages+int(float64(cfg.messages)*cfg.dupRatio)+1)
	for i := range cfg.messages {
		order = append(order, i)
	}
	dups := 0
	for i := range cfg.messages {
		if rng.Float64() < cfg.dupRatio {
			// The copy goes somewhere after the original.
			at := i + 1 + rng.IntN(len(order)-i)
			order = slices.Insert(order, at, i)
			dups++
		}
	}
	var confirms []*amqp.DeferredConfirmation
	for _, i := range order {
		amount := "100"
		if isPoisonByDesign(paymentKey(i), cfg.poisonEvery) {
			amount = "-100"
		}
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
			MessageId: paymentKey(i), CorrelationId: "corr-" + paymentKey(i), DeliveryMode: amqp.Persistent, Body: []byte(amount),
		})
		if err != nil {
			return dups, fmt.Errorf("ledger: publish: %w", err)
		}
		confirms = append(confirms, c)
		if len(confirms) >= 256 {
			if err := waitConfirms(ctx, confirms); err != nil {
				return dups, err
			}
			confirms = confirms[:0]
		}
	}
	return dups, waitConfirms(ctx, confirms)
}

func waitConfirms(ctx context.Context, cs []*amqp.DeferredConfirmation) error {
	for _, c := range cs {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("ledger: publish confirm: %w", err)
		}
		if !ok {
			return errors.New("ledger: the broker refused a payment")
		}
	}
	return nil
}

// declareQueues declares the queue, its dead-letter queue and the
// consumers' retry queues.
func declareQueues(conn *amqp.Connection, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue+".dlq", true, false, false, false, nil); err != nil {
		return fmt.Errorf("ledger: declare: %w", err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("ledger: declare: %w", err)
	}
	for _, d := range retryDelays() {
		if _, err := ch.QueueDeclare(rabbitmq.RetryQueue(queue, d), true, false, false, false, amqp.Table{
			"x-message-ttl": d.Milliseconds(), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue,
		}); err != nil {
			return fmt.Errorf("ledger: declare: %w", err)
		}
	}
	return nil
}

func deleteQueues(url, queue string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, q := range []string{queue, queue + ".dlq"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	for _, d := range retryDelays() {
		_, _ = ch.QueueDelete(rabbitmq.RetryQueue(queue, d), false, false, false)
	}
}

// queueDepth is how many ready messages q holds.
func queueDepth(conn *amqp.Connection, q string) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("ledger: queue %s: %w", q, err)
	}
	return st.Messages, nil
}

// pendingMessages is how many messages the queue and its retry queues
// hold, ready or delivered and unacked (a queue's count has only the ready
// ones; a consumer's unacked ones show in the queue once it is gone).
func pendingMessages(conn *amqp.Connection, queue string) (int, error) {
	n := 0
	for _, q := range append([]string{queue}, retryNames(queue)...) {
		d, err := queueDepth(conn, q)
		if err != nil {
			return 0, err
		}
		n += d
	}
	return n, nil
}

func retryNames(queue string) []string {
	var names []string
	for _, d := range retryDelays() {
		names = append(names, rabbitmq.RetryQueue(queue, d))
	}
	return names
}

// drainDeadLetters reads the dead-letter queue and returns each dead
// payment's reason, and how many copies it held.
func drainDeadLetters(conn *amqp.Connection, q string) (map[string]string, int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, 0, err
	}
	defer ch.Close()
	reasons, copies := map[string]string{}, 0
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			return reasons, copies, nil
		}
		copies++
		// "<outcome>: <the client's error chain>": keep the outcome and the
		// handler's own words, the last link of the chain.
		// A copy of a payment poisoned before reads "client: poisoned
		// (attempts: N)": the grid answered POISONED without a handler.
		reason, _ := d.Headers["x-grid-reason"].(string)
		outcome, detail, _ := strings.Cut(reason, ": ")
		detail, _, _ = strings.Cut(detail, " (attempts")
		if i := strings.LastIndex(detail, ": "); i >= 0 {
			detail = detail[i+2:]
		}
		if detail == "poisoned" {
			detail = "a copy of a payment poisoned before"
		}
		reasons[d.MessageId] = strings.TrimSpace(outcome + ": " + detail)
	}
}

func count(ctx context.Context, db *sql.DB, query string) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, query).Scan(&n); err != nil {
		return 0, fmt.Errorf("ledger: %s: %w", query, err)
	}
	return n, nil
}

// fleet runs the consumer processes, restarting each when it ends.
type fleet struct {
	self  string
	args  []string
	log   io.Writer
	mu    sync.Mutex
	procs []*exec.Cmd
	done  bool
	exits map[int]int // exit code -> count
	wg    sync.WaitGroup
}

func newFleet(self string, args []string, n int, log io.Writer) *fleet {
	f := &fleet{self: self, args: args, log: log, procs: make([]*exec.Cmd, n), exits: map[int]int{}}
	for i := range n {
		f.wg.Go(func() { f.supervise(i) })
	}
	return f
}

// supervise runs consumer i until the fleet stops.
func (f *fleet) supervise(i int) {
	for {
		cmd := exec.Command(f.self, f.args...)
		cmd.Env = append(os.Environ(), consumerEnv+"=1")
		cmd.Stderr = f.log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		f.mu.Lock()
		if f.done {
			f.mu.Unlock()
			return
		}
		if err := cmd.Start(); err != nil {
			f.mu.Unlock()
			fmt.Fprintf(f.log, "ledger: start consumer %d: %v\n", i, err)
			return
		}
		f.procs[i] = cmd
		f.mu.Unlock()
		_ = cmd.Wait()
		f.mu.Lock()
		f.exits[cmd.ProcessState.ExitCode()]++
		done := f.done
		f.mu.Unlock()
		if done {
			return
		}
	}
}

// kill sends SIGKILL to consumer i; its supervisor starts it again.
func (f *fleet) kill(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.procs[i]; p != nil && p.Process != nil {
		_ = p.Process.Kill()
	}
}

// stop sends SIGTERM to every consumer and waits for them.
func (f *fleet) stop() {
	f.mu.Lock()
	if !f.done {
		f.done = true
		for _, p := range f.procs {
			if p != nil && p.Process != nil {
				_ = p.Process.Signal(syscall.SIGTERM)
			}
		}
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *fleet) exitsAfterCommit() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exits[exitAfterCommit]
}

// JSON reports whether --json asked for one JSON object.
func (c Config) JSON() bool { return c.json }
