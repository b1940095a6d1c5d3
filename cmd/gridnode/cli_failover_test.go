package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/internal/testwait"
)

// TestCLIRidesThroughAKilledNode: the CLI is a routing client of every
// address it is given (GRID_ADDR here, comma-separated). Right after kill
// -9 of the node at the first address, the leader of shard 0, each of 30
// reserves of new keys (spread over every shard) is ACQUIRED: the CLI
// takes the cluster map from a live node, sends each key to its shard's
// leader, and resends within its retry budget while the dead node's shard
// elects a new one. (Before, the CLI dialled the first address alone, and
// a reserve forwarded to the dead leader failed as an unknown outcome.)
func TestCLIRidesThroughAKilledNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 gridnode processes")
	}
	pc := startProcCluster(t, 3)
	c := dialCluster(t, pc)
	pc.waitHealthy(c, 90*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := -1
	testwait.For(t, 30*time.Second, "a leader of shard 0", func() bool {
		leader = pc.shardLeader(ctx, 0)
		return leader >= 0
	})
	addrs := pc.addrs()
	first := addrs[leader]
	addrs = slices.Insert(slices.Delete(addrs, leader, leader+1), 0, first)
	t.Setenv(envAddr, strings.Join(addrs, ","))
	pc.kill9(leader)
	failed := 0
	for i := range 30 {
		code, stdout, stderr := cli(t, "reserve", "--ns", "cli-failover", "--key", fmt.Sprintf("k%d", i), "--timeout", "10s", "--json")
		if code != 0 || oneJSON(t, stdout)["outcome"] != "ACQUIRED" {
			failed++
			t.Errorf("reserve k%d right after the node at the first address (leader of shard 0) was killed: exit %d, stdout %q, stderr %q", i, code, stdout, stderr)
		}
	}
	if failed > 0 {
		pc.dumpLogs()
	}
}
