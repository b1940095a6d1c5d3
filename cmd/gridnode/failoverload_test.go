package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/digest"
)

// failoverLoad is client load on a cluster: on every shard, workers
// reserve and complete fresh keys of that shard, one at a time. It keeps
// the keys whose Complete was acknowledged and, once the fault is marked,
// each shard's time from the fault to its first acknowledged write among
// those sent after the fault.
type failoverLoad struct {
	c             *client.Client
	ns            string
	slots, shards int

	faultAt  atomic.Int64   // UnixNano of the start of the fault; 0 before
	inEffect atomic.Int64   // UnixNano when the fault was in effect: writes sent from then on are after it
	firstAck []atomic.Int64 // by shard: ns from the fault to its first acknowledged write sent after it; 0 none yet
	lastErr  []atomic.Value // by shard: string, the last failed write sent after the fault
	failed   atomic.Int64   // calls that failed while the load ran (unavailable, outcome unknown, BUSY after a resend)

	mu       sync.Mutex
	acked    []ackedKey
	failures map[string]int // by kind (failureKind)
}

type ackedKey struct {
	key        string
	shard      int
	afterFault bool // its Complete was sent after the fault
}

// writeTimeout bounds each call of the load, as an application would.
const writeTimeout = 10 * time.Second

func newFailoverLoad(c *client.Client, m client.ClusterMap) *failoverLoad {
	return &failoverLoad{c: c, ns: fmt.Sprintf("failover-%d", time.Now().UnixNano()),
		slots: m.Slots, shards: m.ShardCount,
		firstAck: make([]atomic.Int64, m.ShardCount), lastErr: make([]atomic.Value, m.ShardCount)}
}

func (l *failoverLoad) shardOf(key string) int {
	slot := digest.Record(l.ns, []byte(key), nil).Slot(uint32(l.slots))
	return int(uint64(slot) * uint64(l.shards) / uint64(l.slots))
}

// run starts perShard workers on every shard; they stop when ctx ends and
// wg is done.
func (l *failoverLoad) run(ctx context.Context, wg *sync.WaitGroup, perShard int) {
	for s := range l.shards {
		for w := range perShard {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					if key := fmt.Sprintf("s%d-w%d-%d", s, w, i); l.shardOf(key) == s {
						l.write(ctx, key, s)
					}
				}
			})
		}
	}
}

// markFault notes a fault started at start and in effect now: only
// writes sent from now on count as sent after it, and times are measured
// from start.
func (l *failoverLoad) markFault(start time.Time) {
	l.faultAt.Store(start.UnixNano())
	l.inEffect.Store(time.Now().UnixNano())
}

// write reserves and completes key of shard, noting what was acknowledged.
func (l *failoverLoad) write(ctx context.Context, key string, shard int) {
	opCtx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	sent := time.Now()
	r, err := l.c.Reserve(opCtx, l.ns, key, client.WithLease(time.Minute))
	if err != nil || r.Outcome != client.OutcomeAcquired {
		// Unavailable during the failover, or BUSY after a resend that
		// may have been granted: the key is left alone.
		l.failure(ctx, shard, sent, failureKind("reserve", r.Outcome, err), fmt.Sprintf("reserve %s: outcome %v, error %v", key, r.Outcome, err))
		return
	}
	l.acknowledged(shard, sent)
	sent = time.Now()
	if _, err := l.c.Complete(opCtx, l.ns, key, r.Token, client.WithResult([]byte(key))); err != nil {
		l.failure(ctx, shard, sent, failureKind("complete", client.OutcomeOK, err), fmt.Sprintf("complete %s: %v", key, err))
		return
	}
	after := l.acknowledged(shard, sent)
	l.mu.Lock()
	l.acked = append(l.acked, ackedKey{key: key, shard: shard, afterFault: after})
	l.mu.Unlock()
}

// failure notes a failed call of a write sent at sent, unless it failed
// because the load was stopped (ctx ended).
func (l *failoverLoad) failure(ctx context.Context, shard int, sent time.Time, kind, what string) {
	if ctx.Err() != nil {
		return
	}
	l.failed.Add(1)
	l.mu.Lock()
	if l.failures == nil {
		l.failures = map[string]int{}
	}
	l.failures[kind]++
	l.mu.Unlock()
	if f := l.inEffect.Load(); f != 0 && sent.UnixNano() >= f {
		l.lastErr[shard].Store(what)
	}
}

// failureKind names a failed call of op by its error's class, or by its
// outcome when it returned none.
func failureKind(op string, outcome client.Outcome, err error) string {
	switch {
	case err == nil:
		return fmt.Sprintf("%s %v", op, outcome)
	case errors.Is(err, context.DeadlineExceeded):
		return op + " timed out"
	case errors.Is(err, client.ErrBusy):
		return op + " busy"
	case errors.Is(err, client.ErrUnavailable):
		return op + " unavailable"
	default:
		return op + " " + err.Error()
	}
}

// failureCounts is the failed calls by kind.
func (l *failoverLoad) failureCounts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.failures)
}

// acknowledged notes an acknowledged write to shard sent at sent; it
// reports whether it was sent after the fault.
func (l *failoverLoad) acknowledged(shard int, sent time.Time) bool {
	if f := l.inEffect.Load(); f == 0 || sent.UnixNano() < f {
		return false
	}
	took := time.Now().UnixNano() - l.faultAt.Load()
	first := &l.firstAck[shard]
	for {
		old := first.Load()
		if old != 0 && old <= took || first.CompareAndSwap(old, took) {
			return true
		}
	}
}

// recovered is the time from the fault until every shard had acknowledged
// a write sent after it; false while one has not.
func (l *failoverLoad) recovered() (time.Duration, bool) {
	var worst int64
	for s := range l.firstAck {
		took := l.firstAck[s].Load()
		if took == 0 {
			return 0, false
		}
		worst = max(worst, took)
	}
	return time.Duration(worst), true
}

// progress says, for each shard, whether it has acknowledged a write
// since the fault, its completed keys and its last error since the fault.
func (l *failoverLoad) progress() string {
	out := ""
	done := l.completedOn()
	for s := range l.firstAck {
		out += fmt.Sprintf("shard %d: writable again %v, %d keys completed, last error %v; ",
			s, l.firstAck[s].Load() != 0, done[s], l.lastErr[s].Load())
	}
	return out
}

// completedOn counts the acknowledged Completes of each shard.
func (l *failoverLoad) completedOn() []int {
	n := make([]int, l.shards)
	for _, k := range l.ackedKeys() {
		n[k.shard]++
	}
	return n
}

func (l *failoverLoad) ackedKeys() []ackedKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked)
}
