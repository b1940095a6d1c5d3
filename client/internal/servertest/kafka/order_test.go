package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/servertest/adaptertest"
	"github.com/l4xg/grid/client/kafka"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// These tests run on kfake and a real grid node, on a topic of two
// partitions whose records all arrive in one poll: they are produced
// before the consumer starts.

const (
	orderTopic = "orders"
	orderGroup = "ordering"
)

type orderEnv struct {
	seeds []string
	prod  *kgo.Client
	adm   *kadm.Client
}

func newOrderEnv(t *testing.T) *orderEnv {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, orderTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &orderEnv{seeds: c.ListenAddrs(), prod: prod, adm: kadm.NewClient(prod)}
}

// orderRecord is a record for partition p with idempotency key key, and,
// where not empty, an entity and its version in headers and a record key.
func orderRecord(p int32, key, entity string, version uint64, recordKey string) *kgo.Record {
	r := &kgo.Record{Topic: orderTopic, Partition: p, Value: []byte(key),
		Headers: []kgo.RecordHeader{{Key: kafka.KeyHeader, Value: []byte(key)}}}
	if entity != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "entity", Value: []byte(entity)},
			kgo.RecordHeader{Key: "version", Value: fmt.Append(nil, version)})
	}
	if recordKey != "" {
		r.Key = []byte(recordKey)
	}
	return r
}

func orderEntity(r *kgo.Record) (string, uint64, bool) {
	e := header(r, "entity")
	var v uint64
	_, err := fmt.Sscan(header(r, "version"), &v)
	return e, v, e != "" && err == nil
}

func (e *orderEnv) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	if err := e.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// consume runs Consume with the entity rule on a group client of its own
// until the test ends, and closes the client after it returns.
func (e *orderEnv) consume(t *testing.T, grid *client.Client, h kafka.Handler, opts ...kafka.Option) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds...), kgo.ConsumerGroup(orderGroup), kgo.ConsumeTopics(orderTopic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close) // after Consume has returned: cleanups run last first
	opts = append([]kafka.Option{kafka.WithEntity(orderEntity)}, opts...)
	adaptertest.Start(t, func(ctx context.Context) error {
		return kafka.Consume(ctx, cl, grid, adaptertest.Namespace, h, opts...)
	})
}

// lag is how many records of the topic the group has not committed past.
func (e *orderEnv) lag(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	ends, err := e.adm.ListEndOffsets(ctx, orderTopic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := e.adm.FetchOffsets(ctx, orderGroup)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = kadm.OffsetResponses{}, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok {
			at = c.At
		}
		lag += o.Offset - at
	})
	return int(lag)
}

// orderLog records which handlers started and the order they finished in.
type orderLog struct {
	mu       sync.Mutex
	started  map[string]chan struct{}
	applied  []string
	problems []string
}

func newOrderLog(keys ...string) *orderLog {
	l := &orderLog{started: map[string]chan struct{}{}}
	for _, k := range keys {
		l.started[k] = make(chan struct{})
	}
	return l
}

func (l *orderLog) start(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch := l.started[key]; ch != nil {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

func (l *orderLog) apply(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applied = append(l.applied, key)
}

func (l *orderLog) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

func (l *orderLog) result() (applied, problems []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.applied), slices.Clone(l.problems)
}

// Records that must keep their order, first and then next, arrive in one
// poll with another record, other, that may run beside them. first's
// handler waits until other has started (lanes run at once), then gives
// next a second to start beside it, which it must not. For each order:
// ByEntity (the default), two versions of one entity with different keys
// in one partition; ByRecordKey, two records with one record key;
// ByPartition, two records of one partition, other in the other one.
func TestLanesKeepOffsetOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []kafka.Option
		first *kgo.Record
		other *kgo.Record
		next  *kgo.Record
	}{
		{name: "ByEntity",
			first: orderRecord(0, "first", "order-1", 1, ""),
			other: orderRecord(0, "other", "order-2", 1, ""),
			next:  orderRecord(0, "next", "order-1", 2, "")},
		{name: "ByRecordKey", opts: []kafka.Option{kafka.WithOrder(kafka.ByRecordKey)},
			first: orderRecord(0, "first", "", 0, "acct-1"),
			other: orderRecord(0, "other", "", 0, "acct-2"),
			next:  orderRecord(0, "next", "", 0, "acct-1")},
		{name: "ByPartition", opts: []kafka.Option{kafka.WithOrder(kafka.ByPartition)},
			first: orderRecord(0, "first", "", 0, ""),
			other: orderRecord(1, "other", "", 0, ""),
			next:  orderRecord(0, "next", "", 0, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newOrderEnv(t)
			grid, _ := adaptertest.Grid(t)
			e.produce(t, tc.first, tc.other, tc.next)
			log := newOrderLog("first", "other", "next")
			e.consume(t, grid, func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) {
				log.start(l.Key)
				if l.Key == "first" {
					select {
					case <-log.started["other"]:
					case <-time.After(10 * time.Second):
						log.problem("other did not start while first ran: lanes did not run at once")
					}
					select {
					case <-log.started["next"]:
						log.problem("next started while first ran")
					case <-time.After(time.Second):
					}
				}
				log.apply(l.Key)
				return nil, nil
			}, tc.opts...)
			testwait.Until(t, 20*time.Second, func() string {
				if n := e.lag(t); n != 0 {
					return fmt.Sprintf("%d records not committed past", n)
				}
				if applied, _ := log.result(); len(applied) < 3 {
					return fmt.Sprintf("applied %v, want all three", applied)
				}
				return ""
			})
			applied, problems := log.result()
			for _, p := range problems {
				t.Error(p)
			}
			if len(applied) != 3 || slices.Index(applied, "first") > slices.Index(applied, "next") {
				t.Errorf("applied %v, want each once and first before next", applied)
			}
		})
	}
}

// A version that fails retryably holds back the entity's next version in
// its partition: the next one runs only after it succeeded. Before, the
// next version ran beside it and completed, and the retried one then
// answered STALE and was dropped without being applied.
func TestRetriedVersionIsNotOvertaken(t *testing.T) {
	e := newOrderEnv(t)
	grid, _ := adaptertest.Grid(t)
	e.produce(t, orderRecord(0, "v1", "order-1", 1, ""), orderRecord(0, "v2", "order-1", 2, ""),
		orderRecord(0, "after", "", 0, ""))
	log := newOrderLog()
	var failOnce sync.Once
	e.consume(t, grid, func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) {
		if l.Key == "v1" {
			failed := false
			failOnce.Do(func() { failed = true })
			if failed {
				return nil, client.RetryAfter(errors.New("ledger busy"), 100*time.Millisecond)
			}
		}
		log.apply(l.Key)
		return nil, nil
	})
	testwait.Until(t, 20*time.Second, func() string {
		if n := e.lag(t); n != 0 {
			applied, _ := log.result()
			return fmt.Sprintf("%d records not committed past; applied %v", n, applied)
		}
		return ""
	})
	applied, _ := log.result()
	if want := []string{"v1", "v2"}; !slices.Equal(slices.DeleteFunc(slices.Clone(applied), func(k string) bool { return k == "after" }), want) {
		t.Errorf("order-1's versions applied %v, want %v", applied, want)
	}
	if slices.Index(applied, "after") < 0 {
		t.Errorf("applied %v, want the record after them too", applied)
	}
}
