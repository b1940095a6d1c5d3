package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The Kafka run's shape.
const (
	// kafkaPartitions are the payments topic's partitions: two for each
	// of the default four consumers.
	kafkaPartitions = 8
	// kafkaSession is the consumers' session timeout: a consumer killed
	// with kill -9 leaves the group (a rebalance) this long after its
	// last heartbeat, and its partitions wait as long.
	kafkaSession = 3 * time.Second
	// kafkaRebalance bounds how long the group waits for its members to
	// rejoin in a rebalance (a poll in hand is settled first,
	// kgo.BlockRebalanceOnPoll).
	kafkaRebalance = 8 * time.Second
)

// kafkaBroker is a kfake cluster the run starts in its own process, on a
// loopback port, with the payments topic "<name>" (kafkaPartitions
// partitions), consumed by the consumer group "<name>", and the
// dead-letter topic "<name>.dlq" (kafka.WithDeadLetterTopic).
type kafkaBroker struct {
	cluster *kfake.Cluster
	seeds   []string
	topic   string
	cl      *kgo.Client // produces the payments, reads the dead letters
	adm     *kadm.Client
	read    map[int32]int64 // the dead-letter topic's next offset to read, by partition
}

var _ broker = (*kafkaBroker)(nil)

func openKafka(ctx context.Context, name string, log io.Writer) (*kafkaBroker, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(kafkaPartitions, name), kfake.SeedTopics(1, name+".dlq"),
		kfake.GroupMinSessionTimeout(time.Second),
		kfake.WithLogger(kfake.BasicLogger(log, kfake.LogLevelWarn)))
	if err != nil {
		return nil, fmt.Errorf("ledger: start kfake: %w", err)
	}
	seeds := cluster.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(name),
		kgo.ConsumeTopics(name+".dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.WithLogger(kgo.BasicLogger(log, kgo.LogLevelWarn, nil)))
	if err != nil {
		cluster.Close()
		return nil, fmt.Errorf("ledger: Kafka client: %w", err)
	}
	b := &kafkaBroker{cluster: cluster, seeds: seeds, topic: name, cl: cl, adm: kadm.NewClient(cl), read: map[int32]int64{}}
	if err := cl.Ping(ctx); err != nil {
		b.close()
		return nil, fmt.Errorf("ledger: kfake at %v: %w", seeds, err)
	}
	return b, nil
}

func (b *kafkaBroker) consumerArgs() []string {
	return []string{"--broker-addr", strings.Join(b.seeds, ","), "--queue", b.topic}
}

// publish produces the payments, 256 at a time, each acknowledged. The
// record key and the idempotency-key header are the payment's key, so a
// payment and its duplicate share a partition.
func (b *kafkaBroker) publish(ctx context.Context, ps []payment) error {
	for len(ps) > 0 {
		n := min(len(ps), 256)
		recs := make([]*kgo.Record, n)
		for i, p := range ps[:n] {
			recs[i] = &kgo.Record{Key: []byte(p.key), Value: []byte(p.body), Headers: []kgo.RecordHeader{
				{Key: kafka.KeyHeader, Value: []byte(p.key)}, {Key: "correlation-id", Value: []byte("corr-" + p.key)}}}
		}
		if err := b.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("ledger: produce: %w", err)
		}
		ps = ps[n:]
	}
	return nil
}

// pending is the group's lag: the records past its committed offsets.
func (b *kafkaBroker) pending(ctx context.Context) (int, error) {
	ends, err := b.adm.ListEndOffsets(ctx, b.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("ledger: end offsets: %w", err)
	}
	committed, err := b.adm.FetchOffsets(ctx, b.topic) // the group is named as the topic
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return 0, fmt.Errorf("ledger: committed offsets: %w", err)
	}
	lag := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At > 0 {
			at = c.At
		}
		lag += max(o.Offset-at, 0)
	})
	return int(lag), nil
}

// deadLetters reads the dead-letter topic up to its end offsets as they
// were when it was called.
func (b *kafkaBroker) deadLetters(ctx context.Context) ([]deadLetter, error) {
	ends, err := b.adm.ListEndOffsets(ctx, b.topic+".dlq")
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: dead-letter end offsets: %w", err)
	}
	behind := func() bool {
		short := false
		ends.Each(func(o kadm.ListedOffset) { short = short || b.read[o.Partition] < o.Offset })
		return short
	}
	var out []deadLetter
	for behind() {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := b.cl.PollFetches(pctx)
		cancel()
		got := 0
		fs.EachRecord(func(r *kgo.Record) {
			got++
			b.read[r.Partition] = r.Offset + 1
			out = append(out, deadLetter{key: header(r, kafka.KeyHeader), reason: gridReason(header(r, kafka.ReasonHeader))})
		})
		if got == 0 {
			return out, fmt.Errorf("ledger: the dead-letter topic gave nothing within 10s: %w", fs.Err0())
		}
	}
	return out, nil
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func (b *kafkaBroker) close() {
	b.cl.Close()
	b.cluster.Close()
}

// consumeKafka consumes the topic as a member of the group "<queue>"
// through client/kafka, a poll of at most f.prefetch records at once,
// dead letters to "<queue>.dlq". Closing the client leaves the group.
func consumeKafka(ctx context.Context, grid *client.Client, f consumerFlags, pay payFunc) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(f.addr, ",")...),
		kgo.ConsumerGroup(f.queue), kgo.ConsumeTopics(f.queue),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.SessionTimeout(kafkaSession), kgo.HeartbeatInterval(kafkaSession/10), kgo.RebalanceTimeout(kafkaRebalance),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)))
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	h := func(ctx context.Context, r *kgo.Record, l client.Lease) ([]byte, error) { return pay(ctx, r.Value, l) }
	return kafka.Consume(ctx, cl, grid, namespace, h,
		kafka.WithMaxPoll(f.prefetch), kafka.WithDeadLetterTopic(f.queue+".dlq"),
		kafka.WithProcessOptions(client.WithLease(f.lease)))
}
