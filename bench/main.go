// Command bench runs the side-by-side benchmark of the grid against Redis
// and etcd: the same workloads, interleaved per round, summarized as the
// median of the rounds with the ratio of each target to the grid measured
// in the same round. See bench/README.md.
//
//	go run ./bench [flags] [WORKLOAD...]
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
