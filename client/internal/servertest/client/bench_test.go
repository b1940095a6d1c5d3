package client_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/proccpu"
)

// BenchmarkReserveUnique measures reserves of unique keys from 50 concurrent
// callers through the real gRPC path, client batching on, against a real
// single node whose Raft log is fsync'd (as in production). The node runs
// in this process: cpu-us/op is client and node together, the figure to
// set beside bench's node_cpu_us_per_op plus client_cpu_us_per_op, and
// steadier than either (no child process, no other target in the run).
//
//	go test ./client -run xxx -bench ReserveUnique -benchtime 5s
func BenchmarkReserveUnique(b *testing.B) {
	for _, batching := range []bool{true, false} {
		b.Run(fmt.Sprintf("batching=%v", batching), func(b *testing.B) {
			shards, _ := strconv.Atoi(os.Getenv("BENCH_SHARDS"))
			n := gridtest.Start(b, gridtest.Options{Sync: os.Getenv("BENCH_NOSYNC") == "", Shards: shards})
			c, err := client.Dial(context.Background(), n.Addr(), client.WithBatching(batching), client.WithMaxInFlight(inflight()))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var seq atomic.Int64
			var failed atomic.Int64
			b.SetParallelism(25) // 2 cores x 25 = 50 callers
			cpu0, cpuOK := proccpu.Used()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					key := fmt.Sprintf("bench-%d", seq.Add(1))
					r, err := c.Reserve(ctx, "bench", key, client.WithLease(30*time.Second))
					if err != nil || r.Outcome != client.OutcomeAcquired {
						failed.Add(1)
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
			if cpu1, ok := proccpu.Used(); ok && cpuOK {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			}
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d reserves failed", f)
			}
		})
	}
}

func inflight() int {
	if n, _ := strconv.Atoi(os.Getenv("BENCH_INFLIGHT")); n > 0 {
		return n
	}
	return 8
}
