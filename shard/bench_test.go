package shard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/proccpu"
	"github.com/l4xg/grid/keyspace"
)

// BenchmarkPropose measures reserves of unique keys proposed by 50
// concurrent callers straight into the shards of a host (no gRPC), with the
// Raft log fsync'd, to separate the consensus and storage path from the RPC
// path. cpu-us/op is the process's CPU per reserve, callers included: the
// figure to set beside bench's node_cpu_us_per_op plus client_cpu_us_per_op.
func BenchmarkPropose(b *testing.B) {
	for _, shards := range []int{1, 8} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			h, err := openStandalone(HostConfig{DataDir: b.TempDir(), Shards: shards, NoSync: os.Getenv("BENCH_NOSYNC") != "", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := h.WaitReady(ctx); err != nil {
				b.Fatal(err)
			}
			var seq atomic.Uint64
			b.SetParallelism(25)
			cpu0, cpuOK := proccpu.Used()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d := digest.Key("bench", fmt.Appendf(nil, "k%d", seq.Add(1)))
					cmd := keyspace.Command{Op: keyspace.OpReserve, Digest: d, Lease: 30000, Retention: 60000, MaxAttempts: 5}
					if _, err := h.For(d).Propose(ctx, []keyspace.Command{cmd}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
			if cpu1, ok := proccpu.Used(); ok && cpuOK {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			}
		})
	}
}
