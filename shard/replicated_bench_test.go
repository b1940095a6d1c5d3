package shard

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

// BenchmarkReplicatedPropose measures reserves of unique keys proposed by
// 50 concurrent callers straight into the shard leaders of three hosts on
// loopback (8 shards, every one a 3-voter group over the hosts' muxes, the
// log fsync'd), to measure replication without gRPC: for instance with and
// without pipelined AppendEntries.
//
// It runs with 1, 2 and 3 entries in flight per shard leader.
//
// go test ./shard -run XXX -bench ReplicatedPropose -benchtime 5s
func BenchmarkReplicatedPropose(b *testing.B) {
	for _, inflight := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) { benchReplicatedPropose(b, inflight) })
	}
}

func benchReplicatedPropose(b *testing.B, inflight int) {
	nh := tunedNetHosts(b, 3, false, func(c *HostConfig) { c.Shards, c.NoSync, c.MaxInflight = 8, false, inflight })
	leaders := make([]atomic.Pointer[Replica], 8)
	for s := range leaders {
		_, l := nh.leader(s)
		leaders[s].Store(l)
	}
	// follow finds shard s's leader again after a leadership change (a
	// busy machine can miss heartbeats).
	follow := func(s int) {
		for range 1000 {
			for i := range nh.hosts {
				if r := nh.replica(i, s); r.IsLeader() {
					leaders[s].Store(r)
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	h := nh.hosts[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var seq atomic.Uint64
	b.SetParallelism(25)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d := digest.Key("bench", fmt.Appendf(nil, "k%d", seq.Add(1)))
			cmd := keyspace.Command{Op: keyspace.OpReserve, Digest: d, Lease: 30000, Retention: 60000, MaxAttempts: 5}
			s := h.ShardOf(d)
			_, err := leaders[s].Load().Propose(ctx, []keyspace.Command{cmd})
			for errors.Is(err, ErrNotLeader) {
				follow(s)
				_, err = leaders[s].Load().Propose(ctx, []keyspace.Command{cmd})
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}
