// Package kafka runs the grid's idempotent receiver on a Kafka consumer
// group, over the broker's own Go client (github.com/twmb/franz-go/pkg/kgo):
// every record goes through client.Process, and its outcome decides what
// is committed.
//
//	cl, _ := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("ledger"),
//		kgo.ConsumeTopics("payments"), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
//	err := kafka.Consume(ctx, cl, grid, "payments", handle)
//
// # Outcomes
//
// Kafka has no per-record ack: a partition's committed offset says that
// every record before it is done. So a poll's records run at once, in
// lanes (see Order below; the grid client batches their Reserves into few
// Batches), and then, per partition, the longest run of settled records
// from the start is committed:
//
//	the handler succeeded (COMPLETED)        settled
//	DUPLICATE, STALE                         settled: the record was handled before
//	POISONED, MISMATCH, no key               produced to the dead-letter topic
//	                                         (WithDeadLetterTopic), then settled
//	the handler failed, retryably (FAILED)   not settled: the partition is paused until the
//	BUSY (another consumer holds the key)    grid's retry-after (BUSY at most WithBusyDelay),
//	the grid unreachable, a lease lost       or WithErrorDelay, and fetched again from the
//	                                         record on; later records answer DUPLICATE then
//	shutdown (ctx ended)                     running handlers finish within WithStopGrace (the
//	                                         key completed; one cancelled past it: failed,
//	                                         attempt counted); nothing in flight is committed:
//	                                         the partition's next owner fetches the records
//
// # Order
//
// Records that must not overtake each other share a lane, and a lane runs
// its records one after the other, in poll order (offset order within a
// partition), while lanes run at once. By default (ByEntity) a lane holds
// the records of one idempotency key (so that a duplicate within a poll
// answers DUPLICATE) and those of one entity (WithEntity, when it names
// one): two versions of an entity are applied in offset order, and the
// older is not refused as STALE because the newer overtook it. ByRecordKey
// also puts records with the same Kafka record key in one lane, and
// ByPartition all records of a partition, as a plain Kafka consumer would
// (WithOrder). Records linked by any of these share one lane.
//
// A record that does not settle (FAILED, BUSY, an error, shutdown) stops
// its lane in its partition: the lane's later records of that partition do
// not run in this poll, and are fetched again after it, since the
// partition is rewound to it. So a later version never runs before an
// earlier one of its partition that is still to be retried (which it would
// then make STALE), and no commit passes a record that has not run. Kafka
// orders nothing across partitions: a lane's records of other partitions
// go on.
//
// The client must consume as a group with auto-commit off, and block
// rebalances while a poll is processed (kgo.BlockRebalanceOnPoll; Consume
// refuses it otherwise): Consume commits and seeks before it lets a
// rebalance take the poll's partitions, so that their next owner starts
// where this one's settled records end. A commit is bounded by
// commitTimeout: a broker that does not answer costs a poll, not the
// consumer (what was not committed comes again and answers DUPLICATE).
//
// # Keys
//
// The key is the record's "idempotency-key" header, else
// "<topic>/<partition>/<offset>". The offset catches the records a
// consumer group delivers again (after a rebalance or a crash before the
// commit); it does not catch a producer that sent the same event twice (a
// retry without the idempotent producer, or two sends of one business
// event): give such records a header. WithKey replaces the rule.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/adapter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KeyHeader is the header that carries a record's idempotency key.
const KeyHeader = "idempotency-key"

// ReasonHeader carries why a dead letter was set aside.
const ReasonHeader = "grid-reason"

// Handler processes one record under the grid's lease. ctx carries the
// record's "correlation-id" header (client.CorrelationID) and ends when the
// lease is lost, or when Consume stops and its stop grace (WithStopGrace) has run
// out.
type Handler func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error)

// Option configures Consume.
type Option func(*config)

type config struct {
	maxPoll     int
	key         func(*kgo.Record) (string, error)
	process     []client.ProcessOption
	fingerprint func(*kgo.Record) uint64
	entity      func(*kgo.Record) (entity string, version uint64, ok bool)
	delays      adapter.Delays
	order       Order
	deadLetter  string
	registerer  prometheus.Registerer
	logger      *slog.Logger
}

// Order says which records of a poll must run one after the other (see
// the package documentation).
type Order int

// The orders, each keeping the lanes of those before it.
const (
	// ByEntity runs the records of one idempotency key, and those of one
	// entity (WithEntity), one after the other. The default.
	ByEntity Order = iota
	// ByRecordKey also runs the records with one Kafka record key (a
	// non-empty kgo.Record.Key) one after the other.
	ByRecordKey
	// ByPartition runs all records of a partition one after the other.
	ByPartition
)

// WithOrder sets which records of a poll run one after the other.
// Default ByEntity.
func WithOrder(o Order) Option { return func(c *config) { c.order = o } }

// WithMaxPoll sets how many records a poll takes, and so how many run at
// once at most (see Order). Default 500.
func WithMaxPoll(n int) Option { return func(c *config) { c.maxPoll = n } }

// WithKey sets how a record's idempotency key is found. An error
// dead-letters the record.
func WithKey(f func(*kgo.Record) (string, error)) Option { return func(c *config) { c.key = f } }

// WithFingerprint sets a fingerprint of the payload: the same key with
// another fingerprint answers MISMATCH, and the record is dead-lettered.
func WithFingerprint(f func(*kgo.Record) uint64) Option { return func(c *config) { c.fingerprint = f } }

// WithEntity names the entity a record changes and its version, when it
// has them (ok): a version not newer than the entity's last completed one
// answers STALE, and the record is settled without running the handler.
func WithEntity(f func(*kgo.Record) (entity string, version uint64, ok bool)) Option {
	return func(c *config) { c.entity = f }
}

// WithProcessOptions passes options to every client.Process call.
func WithProcessOptions(opts ...client.ProcessOption) Option {
	return func(c *config) { c.process = append(c.process, opts...) }
}

// WithErrorDelay sets how long a partition pauses when the grid could not
// be asked or the lease was lost. Default 1s.
func WithErrorDelay(d time.Duration) Option { return func(c *config) { c.delays.Error = d } }

// WithStopGrace sets how long a stopping Consume (its ctx ended) lets the
// handlers it started finish and settle before it cancels them (default
// 10 s). A handler cancelled mid-way may have applied its effect, so its
// key is failed, the attempt counted, not released: give handlers the
// time their effect takes. 0 cancels them at once.
func WithStopGrace(d time.Duration) Option { return func(c *config) { c.delays.StopGrace = d } }

// WithBusyDelay caps how long a partition pauses after BUSY. Default 1s.
func WithBusyDelay(d time.Duration) Option { return func(c *config) { c.delays.Busy = d } }

// WithDeadLetterTopic produces dead letters to topic, with the reason in
// the "grid-reason" header, before their offsets are committed. Without it
// a dead letter is only counted and logged, and committed past.
func WithDeadLetterTopic(topic string) Option { return func(c *config) { c.deadLetter = topic } }

// WithRegisterer registers the adapter's metrics:
// l4xg_grid_adapter_messages_total{adapter="kafka",outcome,action}.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }

// WithLogger logs what the adapter does to a record besides settling it.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// DefaultKey is the default key rule: the "idempotency-key" header, else
// "<topic>/<partition>/<offset>".
func DefaultKey(r *kgo.Record) (string, error) {
	if v := header(r, KeyHeader); v != "" {
		return v, nil
	}
	return fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), nil
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// Consume polls cl, runs h for each record through grid.Process in
// namespace ns and commits what is settled (see the package
// documentation). It returns nil once ctx has ended and the last poll is
// settled, or an error when the client is closed. Close cl after it
// returns: the client leaves the group, which gives its partitions, with
// the records it did not commit, to the group's other consumers.
func Consume(ctx context.Context, cl *kgo.Client, grid *client.Client, ns string, h Handler, opts ...Option) error {
	cfg := config{maxPoll: 500, key: DefaultKey, delays: adapter.DefaultDelays()}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cl == nil || grid == nil || h == nil:
		return errors.New("kafka: Consume needs a client, a grid client and a handler")
	case cfg.maxPoll < 1:
		return fmt.Errorf("kafka: max poll %d, want at least 1", cfg.maxPoll)
	case cfg.key == nil:
		return errors.New("kafka: nil key rule")
	case cfg.order < ByEntity || cfg.order > ByPartition:
		return fmt.Errorf("kafka: unknown order %d", cfg.order)
	case cfg.delays.Error <= 0 || cfg.delays.Busy <= 0:
		return fmt.Errorf("kafka: error delay %v and busy delay %v, want both more than 0", cfg.delays.Error, cfg.delays.Busy)
	case cl.OptValue(kgo.ConsumerGroup) == "":
		return errors.New("kafka: the client must consume as a group (kgo.ConsumerGroup)")
	case cl.OptValue(kgo.DisableAutoCommit) != true:
		return errors.New("kafka: the client must not commit by itself (kgo.DisableAutoCommit): Consume commits what is settled")
	case cl.OptValue(kgo.BlockRebalanceOnPoll) != true:
		return errors.New("kafka: the client must block rebalances while a poll is processed (kgo.BlockRebalanceOnPoll): Consume commits and rewinds a poll's partitions before it lets them go")
	}
	m, err := adapter.NewMetrics("kafka", cfg.registerer)
	if err != nil {
		return err
	}
	c := &consumer{cfg: cfg, cl: cl, grid: grid, ns: ns, h: h, m: m, iso: client.NewIsolation(), next: map[topicPartition]int64{}}
	defer c.stopResumes()
	for ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, cfg.maxPoll)
		if fetches.IsClientClosed() {
			return errors.New("kafka: the client was closed")
		}
		var ferr error
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = errors.Join(ferr, fmt.Errorf("kafka: fetch %s/%d: %w", topic, p, err))
			}
		})
		if ferr != nil && c.cfg.logger != nil {
			c.cfg.logger.Warn("kafka: fetch errors", "error", ferr)
		}
		c.settle(ctx, fetches.Records())
		cl.AllowRebalance()
	}
	return nil
}

type consumer struct {
	cfg  config
	cl   *kgo.Client
	grid *client.Client
	ns   string
	h    Handler
	m    *adapter.Metrics
	iso  *client.Isolation // keeps a crash loop's culprit apart
	// next is, per partition, the offset after the last record polled: a
	// record elsewhere comes from a partition new to this consumer or
	// rewound, which a crashed consumer may have held (Isolation.Probation).
	next map[topicPartition]int64

	mu      sync.Mutex
	resumes map[*time.Timer]bool
}

// settle runs a poll's records and commits, per partition, the settled
// prefix; a partition with an unsettled record is paused and rewound to it.
func (c *consumer) settle(ctx context.Context, recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	verdicts := make([]adapter.Verdict, len(recs))
	keys := make([]string, len(recs))
	var runs []int // the records to run
	for _, r := range recs {
		p := topicPartition{r.Topic, r.Partition}
		if next, ok := c.next[p]; !ok || next != r.Offset {
			c.iso.Probation()
		}
		c.next[p] = r.Offset + 1
	}
	for i, r := range recs {
		key, err := c.cfg.key(r)
		if err != nil {
			verdicts[i] = adapter.Verdict{Outcome: adapter.NoKey, Action: adapter.DeadLetter, Cause: err}
			continue
		}
		keys[i] = key
		runs = append(runs, i)
	}
	var wg sync.WaitGroup
	for _, lane := range c.lanes(recs, keys, runs) {
		wg.Go(func() { c.runLane(ctx, recs, keys, lane, verdicts) })
	}
	wg.Wait()

	commit := map[string]map[int32]kgo.EpochOffset{}
	rewind := map[string]map[int32]kgo.EpochOffset{}
	stopped := map[topicPartition]bool{}
	for i, r := range recs { // in order within each partition
		p := topicPartition{r.Topic, r.Partition}
		if stopped[p] {
			continue // counted again when it comes back
		}
		v := verdicts[i]
		if v.Action == adapter.DeadLetter && c.cfg.deadLetter != "" {
			if err := c.produceDeadLetter(ctx, r, v); err != nil {
				v = adapter.Verdict{Outcome: v.Outcome, Action: adapter.Retry, Delay: c.cfg.delays.Error, Cause: err}
			}
		}
		c.m.Count(v.Outcome, v.Action)
		c.log(r, v)
		switch v.Action {
		case adapter.Ack, adapter.DeadLetter:
			set(commit, r.Topic, r.Partition, kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1})
		case adapter.Retry:
			stopped[p] = true
			set(rewind, r.Topic, r.Partition, kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset})
			c.pauseFor(r.Topic, r.Partition, v.Delay)
		case adapter.Requeue:
			stopped[p] = true
		}
	}
	if len(rewind) > 0 {
		c.cl.SetOffsets(rewind)
	}
	if len(commit) == 0 {
		return
	}
	var cerr error
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	c.cl.CommitOffsetsSync(cctx, commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		cerr = err
		if resp == nil {
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					cerr = errors.Join(cerr, fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, perr))
				}
			}
		}
	})
	if cerr != nil && c.cfg.logger != nil {
		// Not fatal: what was not committed is fetched again (by this
		// consumer or the partition's next owner) and answers DUPLICATE.
		c.cfg.logger.Warn("kafka: commit failed", "error", cerr)
	}
}

// commitTimeout bounds a commit of a poll's settled records.
const commitTimeout = 30 * time.Second

func set(m map[string]map[int32]kgo.EpochOffset, topic string, p int32, o kgo.EpochOffset) {
	if m[topic] == nil {
		m[topic] = map[int32]kgo.EpochOffset{}
	}
	m[topic][p] = o
}

// lanes groups the records runs (indexes into recs, in poll order) into
// lanes by the configured order: two records share a lane when they share
// the idempotency key (keys), the entity, or, as the order asks, the
// record key or the partition, directly or through other records. Each
// lane lists its records in poll order.
func (c *consumer) lanes(recs []*kgo.Record, keys []string, runs []int) [][]int {
	parent := make(map[int]int, len(runs)) // union-find over record indexes
	var find func(i int) int
	find = func(i int) int {
		if p := parent[i]; p != i {
			parent[i] = find(p)
		}
		return parent[i]
	}
	first := map[string]int{} // a lane's tag -> the first record with it
	for _, i := range runs {
		parent[i] = i
		r := recs[i]
		tags := []string{"k\x00" + keys[i]}
		if c.cfg.entity != nil {
			if e, _, ok := c.cfg.entity(r); ok {
				tags = append(tags, "e\x00"+e)
			}
		}
		if c.cfg.order >= ByRecordKey && len(r.Key) > 0 {
			tags = append(tags, "r\x00"+string(r.Key))
		}
		if c.cfg.order >= ByPartition {
			tags = append(tags, fmt.Sprintf("p\x00%s\x00%d", r.Topic, r.Partition))
		}
		for _, tag := range tags {
			j, seen := first[tag]
			if !seen {
				first[tag] = i
				continue
			}
			if a, b := find(i), find(j); a != b {
				parent[max(a, b)] = min(a, b) // a lane's root is its first record
			}
		}
	}
	byRoot := map[int][]int{}
	var roots []int
	for _, i := range runs {
		root := find(i)
		if _, seen := byRoot[root]; !seen {
			roots = append(roots, root)
		}
		byRoot[root] = append(byRoot[root], i)
	}
	lanes := make([][]int, len(roots))
	for n, root := range roots {
		lanes[n] = byRoot[root]
	}
	return lanes
}

// runLane runs the records of a lane one after the other and sets their
// verdicts. A record that does not settle stops the lane in its partition:
// the lane's later records of that partition do not run (settle rewinds
// the partition to the first record that did not settle, so they never
// reach a commit and come back after it).
func (c *consumer) runLane(ctx context.Context, recs []*kgo.Record, keys []string, lane []int, verdicts []adapter.Verdict) {
	stopped := map[topicPartition]*kgo.Record{}
	for _, i := range lane {
		r := recs[i]
		p := topicPartition{r.Topic, r.Partition}
		if s := stopped[p]; s != nil {
			verdicts[i] = adapter.Verdict{Outcome: adapter.NotStarted, Action: adapter.Requeue,
				Cause: fmt.Errorf("kafka: held back behind offset %d, which did not settle", s.Offset)}
			continue
		}
		v := c.process(ctx, keys[i], r)
		verdicts[i] = v
		if v.Action != adapter.Ack && v.Action != adapter.DeadLetter {
			stopped[p] = r
		}
	}
}

type topicPartition struct {
	topic     string
	partition int32
}

// process runs one record, whose key is key, through the grid and judges
// the outcome.
func (c *consumer) process(ctx context.Context, key string, r *kgo.Record) adapter.Verdict {
	popts := adapter.ProcessOptions(c.cfg.process, c.iso, false, r, c.cfg.fingerprint, c.cfg.entity)
	dctx, dcancel := adapter.Draining(ctx, c.cfg.delays.StopGrace)
	defer dcancel()
	hctx := client.ContextWithCorrelationID(dctx, header(r, "correlation-id"))
	out, err := c.grid.Process(hctx, c.ns, key, func(ctx context.Context, l client.Lease) ([]byte, error) {
		return c.h(ctx, r, l)
	}, popts...)
	return adapter.Judge(ctx, out, err, c.cfg.delays)
}

// pauseFor stops fetching the partition for d.
func (c *consumer) pauseFor(topic string, p int32, d time.Duration) {
	c.cl.PauseFetchPartitions(map[string][]int32{topic: {p}})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resumes == nil {
		c.resumes = map[*time.Timer]bool{}
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		c.cl.ResumeFetchPartitions(map[string][]int32{topic: {p}})
		c.mu.Lock()
		delete(c.resumes, t)
		c.mu.Unlock()
	})
	c.resumes[t] = true
}

// stopResumes cancels the pending resumes: the partitions stay paused in
// a client that stops consuming.
func (c *consumer) stopResumes() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.resumes {
		t.Stop()
	}
	c.resumes = nil
}

// produceDeadLetter produces a copy of r, with the reason, to the
// dead-letter topic and waits for the broker's acknowledgement.
func (c *consumer) produceDeadLetter(ctx context.Context, r *kgo.Record, v adapter.Verdict) error {
	reason := string(v.Outcome)
	if v.Cause != nil {
		reason += ": " + v.Cause.Error()
	}
	dl := &kgo.Record{Topic: c.cfg.deadLetter, Key: r.Key, Value: r.Value, Headers: slices.Clone(r.Headers)}
	dl.Headers = append(dl.Headers,
		kgo.RecordHeader{Key: ReasonHeader, Value: []byte(reason)},
		kgo.RecordHeader{Key: "grid-origin", Value: fmt.Appendf(nil, "%s/%d/%d", r.Topic, r.Partition, r.Offset)})
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.cl.ProduceSync(pctx, dl).FirstErr(); err != nil {
		return fmt.Errorf("kafka: dead letter to %s: %w", c.cfg.deadLetter, err)
	}
	return nil
}

func (c *consumer) log(r *kgo.Record, v adapter.Verdict) {
	if c.cfg.logger != nil && (v.Action != adapter.Ack || v.Cause != nil) {
		c.cfg.logger.Info("kafka: record settled", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
			"outcome", v.Outcome, "action", v.Action, "delay", v.Delay, "cause", v.Cause)
	}
}
