package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	gridnode "github.com/l4xg/grid/node"
	"github.com/l4xg/grid/shard"
)

// Failover with real servers: in-process clusters (gridtest: real Raft,
// Pebble, gRPC and gossip on loopback), through clients with the default
// options. cmd/gridnode's TestSIGSTOPShardLeaderDefaultClient freezes a
// real gridnode process.

// keysOn returns n keys of namespace ns that live on shard s of c.
func keysOn(t *testing.T, c *gridtest.Cluster, ns string, s, n int) []string {
	t.Helper()
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if i > 100000 {
			t.Fatalf("no %d keys on shard %d", n, s)
		}
		if k := fmt.Sprintf("k%d", i); c.ShardOf(ns, k) == s {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestKilledShardLeaderCallersSeeNoError: the node leading a shard is
// killed (no hand-over) while callers reserve and complete keys of that
// shard through a client with the default options. No caller sees an
// error: the sends to the dead node fail (refused, or reset in flight),
// followers name the dead node for a while, and the retry budget outlasts
// the election. (The old policy, 4 sends in about 350 ms, gave up with
// "connection refused", as cluster's TestRollingRestartUnderLoad once did.)
func TestKilledShardLeaderCallersSeeNoError(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{})
	cl, err := client.Dial(context.Background(), strings.Join(c.Addrs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const s = 1
	var victim int
	testwait.For(t, 10*time.Second, "a single leader of shard 1", func() bool {
		l := c.Leaders(s)
		if len(l) == 1 {
			victim = l[0]
		}
		return len(l) == 1
	})
	keys := keysOn(t, c, "kill", s, 64)
	// Warm: the client learns the shard's leader.
	if _, err := cl.Reserve(testCtx(t), "kill", keys[0]); err != nil {
		t.Fatal(err)
	}

	const workers = 4
	var mu sync.Mutex
	var errs []error
	done := 0
	var wg sync.WaitGroup
	killed := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			for i := 1 + w; i < len(keys); i += workers {
				if i == 1+w+4*workers {
					<-killed // the later keys go after the kill
				}
				// Long enough for an election, far short of the test's
				// timeout: the outcome, not the time, is asserted.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				r, err := cl.Reserve(ctx, "kill", keys[i])
				if err == nil && r.Outcome == client.OutcomeAcquired {
					_, err = cl.Complete(ctx, "kill", keys[i], r.Token)
				}
				// A Reserve resent after a send that may have been applied
				// can find its own lease (BUSY): not an error, issue 11.
				cancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", keys[i], err))
				} else {
					done++
				}
				mu.Unlock()
			}
		})
	}
	c.Kill(victim)
	close(killed)
	wg.Wait()
	for _, err := range errs {
		t.Errorf("a caller saw an error: %v", err)
	}
	if done != len(keys)-1 {
		t.Fatalf("%d of %d calls succeeded", done, len(keys)-1)
	}
	if l := c.Leaders(s); len(l) != 1 || l[0] == victim {
		t.Fatalf("shard %d led by %v after the kill of node %d", s, l, victim)
	}
}

// TestStartingMemberRefusalIsNotUnknown: a cluster member that has no map
// yet (it is starting: bootstrap-expect 3, nobody to meet) refuses every
// operation with a Redirect, reason starting. The client retries it under
// its budget and, when the budget is spent, reports the grid unavailable
// without "outcome unknown": nothing was applied. Batch labels it the
// same, and no send counts as possibly applied.
func TestStartingMemberRefusalIsNotUnknown(t *testing.T) {
	nd, err := gridnode.Start(gridnode.Config{
		Host:   shard.HostConfig{NodeID: "node-1", DataDir: t.TempDir(), NoSync: true},
		Listen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Cluster: &gridnode.ClusterConfig{
			RaftListen: "127.0.0.1:0", GossipListen: "127.0.0.1:0", BootstrapExpect: 3,
			Gossip: gossip.FastTiming(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = nd.Stop(ctx)
	}()
	for _, batching := range []bool{true, false} {
		cl, err := client.Dial(context.Background(), nd.Addr(), client.WithBatching(batching),
			client.WithRetryPolicy(client.RetryPolicy{Budget: 500 * time.Millisecond, BaseBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		r, err := cl.Reserve(ctx, "ns", "k")
		sends := r.Sends
		if !errors.Is(err, client.ErrUnavailable) || strings.Contains(err.Error(), "outcome unknown") || sends != 0 ||
			!strings.Contains(err.Error(), "starting") {
			t.Errorf("batching %v: reserve: %v, %d sends counted; want unavailable (starting), not unknown, none counted", batching, err, sends)
		}
		_, errs, err := cl.Batch(ctx, []client.Op{client.ReserveOp("ns", "k"), client.CompleteOp("ns", "k", 7)})
		for i, e := range errs {
			if !errors.Is(e, client.ErrUnavailable) || strings.Contains(e.Error(), "outcome unknown") {
				t.Errorf("batching %v: batch op %d: %v (batch error %v); want unavailable, not unknown", batching, i, e, err)
			}
		}
		_ = cl.Close()
	}
}
