package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/testwait"
)

// TestSIGSTOPShardLeaderDefaultClient: the gridnode process leading a
// shard is frozen with SIGSTOP for 10 s, far past its leader lease, among
// three real processes. Calls on that shard through a routing client with
// the default options succeed within a context of 6 s, shorter than the
// pause: the send to the frozen leader hits the send timeout, the node is
// avoided and the map refreshed, and the retry reaches the new leader
// through another replica. (Before the per-send deadline, every call
// routed to the frozen leader hung until its context ended.)
func TestSIGSTOPShardLeaderDefaultClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 gridnode processes")
	}
	pc := startProcCluster(t, 3)
	c, err := client.Dial(context.Background(), strings.Join(pc.addrs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc.waitHealthy(c, 90*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const s = 0
	leader := -1
	testwait.For(t, 30*time.Second, "a leader of shard 0", func() bool {
		leader = pc.shardLeader(ctx, s)
		return leader >= 0
	})
	var keys []string
	for i := 0; len(keys) < 3; i++ {
		k := fmt.Sprintf("stop-%d", i)
		loc, err := c.Locate(ctx, "stop", k)
		if err != nil {
			t.Fatal(err)
		}
		if loc.Shard == s {
			keys = append(keys, k)
		}
	}
	// The client learns the leader: its first call goes straight there.
	if r, err := c.Reserve(ctx, "stop", keys[0]); err != nil || r.Outcome != client.OutcomeAcquired {
		t.Fatalf("reserve before the pause: %v %v", r.Outcome, err)
	}
	if loc, err := c.Locate(ctx, "stop", keys[0]); err != nil || loc.Leader.Addr != pc.nodes[leader].grpc {
		t.Fatalf("the client takes %+v for the leader, not node %d at %s (%v)", loc.Leader, leader, pc.nodes[leader].grpc, err)
	}

	proc := pc.nodes[leader].p
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := time.AfterFunc(10*time.Second, func() { _ = proc.Signal(syscall.SIGCONT) })
	t.Cleanup(func() {
		resume.Stop()
		_ = proc.Signal(syscall.SIGCONT)
	})
	// One context of 6 s for every call: all of them must succeed while
	// the leader is still frozen.
	cctx, ccancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer ccancel()
	for _, k := range keys[1:] {
		r, err := c.Reserve(cctx, "stop", k)
		if err == nil && r.Outcome == client.OutcomeAcquired {
			_, err = c.Complete(cctx, "stop", k, r.Token)
		}
		if err != nil || r.Outcome != client.OutcomeAcquired {
			t.Fatalf("%s while node %d is frozen: %v %v; want ACQUIRED and completed within 6 s", k, leader, r.Outcome, err)
		}
	}
	if !resume.Stop() {
		t.Fatal("the pause ended before the calls returned") // cannot be: their context has 6 s
	}
	_ = proc.Signal(syscall.SIGCONT)
}
