package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestCLIOnACluster: on a real 3-node cluster (in-process), every verb
// works through any node: a key reserved through node 3 is completed
// through node 1 and read through node 2, whichever node leads its shard.
// status shows the nodes and every shard's replicas with their role,
// health and lag, and each group as its leader reports it;
// drain --wait moves node 3 out of the map, after which the records are
// still served.
func TestCLIOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	t.Parallel()
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{})
	addrs := c.Addrs()

	// Keys over every shard, so that each step is forwarded for some of them.
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	for _, key := range keys {
		base := []string{"--ns", "cli", "--key", key, "--json"}
		code, stdout, stderr := cli(t, "reserve", append([]string{"--addr", addrs[2]}, base...)...)
		m := oneJSON(t, stdout)
		if code != 0 || m["outcome"] != "ACQUIRED" {
			t.Fatalf("reserve %s through node 3: exit %d %v %s", key, code, m, stderr)
		}
		tok := strconv.FormatUint(uint64(m["token"].(float64)), 10)
		code, stdout, stderr = cli(t, "complete", append([]string{"--addr", addrs[0], "--token", tok, "--result", "r-" + key}, base...)...)
		if m := oneJSON(t, stdout); code != 0 || m["outcome"] != "OK" {
			t.Fatalf("complete %s through node 1: exit %d %v %s", key, code, m, stderr)
		}
		code, stdout, stderr = cli(t, "get", append([]string{"--addr", addrs[1]}, base...)...)
		if m := oneJSON(t, stdout); code != 0 || m["state"] != "COMPLETED" || m["result"] != "r-"+key {
			t.Fatalf("get %s through node 2: exit %d %v %s", key, code, m, stderr)
		}
		code, stdout, stderr = cli(t, "reserve", append([]string{"--addr", addrs[1]}, base...)...)
		if m := oneJSON(t, stdout); code != 0 || m["outcome"] != "DUPLICATE" {
			t.Fatalf("reserve %s again through node 2: exit %d %v %s", key, code, m, stderr)
		}
	}

	// status, as a table: three active nodes, alive and ready; every shard
	// has a leader and two followers with a lag.
	c.WaitStable(30 * time.Second)
	code, stdout, stderr := cli(t, "status", "--addr", addrs[1])
	if code != 0 || !strings.Contains(stdout, "NODES") || !strings.Contains(stdout, "SHARDS") || !strings.Contains(stdout, "  DISK\n") {
		t.Fatalf("status: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		if !strings.Contains(stdout, id+"  active  yes    yes    "+addrs[c.Index(id)]) {
			t.Errorf("status: no active, alive and ready row for %s\n%s", id, stdout)
		}
	}
	if n := strings.Count(stdout, "  ok\n"); n != 3 {
		t.Errorf("status: %d nodes whose disk is ok, want 3\n%s", n, stdout)
	}
	if n := strings.Count(stdout, "(leader)"); n != 4 {
		t.Errorf("status: %d leaders for 4 shards\n%s", n, stdout)
	}
	if n := strings.Count(stdout, "(lag "); n != 8 {
		t.Errorf("status: %d followers with a lag, want 8\n%s", n, stdout)
	}
	if n := strings.Count(stdout, "  node-1 node-2 node-3\n"); n != 4 || !strings.Contains(stdout, "GROUP (LEADER'S VIEW)") {
		t.Errorf("status: %d shards whose group the leader reports as node-1 node-2 node-3, want 4\n%s", n, stdout)
	}

	// status --json: the same as one object.
	code, stdout, _ = cli(t, "status", "--addr", addrs[2], "--json")
	m := oneJSON(t, stdout)
	if code != 0 || m["map_epoch"].(float64) < 1 || m["control_leader"] == "" || m["shard_count"] != float64(4) {
		t.Fatalf("status --json: exit %d %v", code, m)
	}
	if nodes := m["nodes"].([]any); len(nodes) != 3 {
		t.Fatalf("status --json: %d nodes", len(nodes))
	}
	leads := 0
	for _, n := range m["nodes"].([]any) {
		leads += int(n.(map[string]any)["leads"].(float64))
		if n.(map[string]any)["replicas"] != float64(4) || n.(map[string]any)["ready"] != true || n.(map[string]any)["disk_full"] != false {
			t.Errorf("status --json: node %v", n)
		}
	}
	if leads != 4 {
		t.Errorf("status --json: the nodes lead %d shards, want 4", leads)
	}
	for _, s := range m["shards"].([]any) {
		sh := s.(map[string]any)
		reps := sh["replicas"].([]any)
		if len(reps) != 3 || sh["leader"] == "" || len(sh["group"].([]any)) != 3 || sh["config_committed"] != true {
			t.Fatalf("status --json: shard %v", sh)
		}
		for _, r := range reps {
			r := r.(map[string]any)
			if r["health"] == "follower" && r["lag"] == nil || r["health"] != "leader" && r["health"] != "follower" || r["role"] != "voter" {
				t.Errorf("status --json: shard %v replica %v", sh["id"], r)
			}
		}
	}

	// drain: unknown nodes are refused; node 3, asked through node 1,
	// leaves the map.
	code, _, stderr = cli(t, "drain", "--addr", addrs[0], "--node", "node-9")
	if code != 1 || !strings.Contains(stderr, "node-9") {
		t.Fatalf("drain of an unknown node: exit %d: %s", code, stderr)
	}
	// 3 nodes, 3 replicas: refused unless forced, saying why and how.
	code, _, stderr = cli(t, "drain", "--addr", addrs[0], "--node", "node-3", "--wait")
	if code == 0 || !strings.Contains(stderr, "under-replicate") || !strings.Contains(stderr, "--force") {
		t.Fatalf("unforced drain of one of 3 nodes with 3 replicas: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = cli(t, "drain", "--addr", addrs[0], "--node", "node-3", "--wait", "--force", "--timeout", "60s")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || !strings.HasPrefix(lines[0], "node node-3: draining") || !strings.HasPrefix(lines[len(lines)-1], "node node-3: removed, 0 replicas left") {
		t.Fatalf("drain --wait: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, "drain", "--addr", addrs[1], "--node", "node-3", "--json")
	if m := oneJSON(t, stdout); code != 0 || m["state"] != "removed" || m["replicas_left"] != float64(0) {
		t.Fatalf("drain of a removed node: exit %d %v", code, m)
	}
	code, stdout, _ = cli(t, "status", "--addr", addrs[0])
	if code != 0 || !strings.Contains(stdout, "node-3  removed") || strings.Contains(stdout, "node-3 (") {
		t.Fatalf("status after the drain: exit %d\n%s", code, stdout)
	}
	for _, key := range keys {
		code, stdout, _ := cli(t, "get", "--addr", addrs[1], "--ns", "cli", "--key", key, "--json")
		if m := oneJSON(t, stdout); code != 0 || m["state"] != "COMPLETED" {
			t.Fatalf("get %s after the drain: exit %d %v", key, code, m)
		}
	}
}

// TestShardHealth: how status judges each replica from the nodes'
// Statuses: its role by the leader's configuration (or its own view
// without the leader's answer), its health and its lag.
func TestShardHealth(t *testing.T) {
	group := []client.GroupMember{{ID: "a", Voter: true}, {ID: "b", Voter: true}, {ID: "c", Voter: true}, {ID: "g", Voter: false}}
	st := func(state, suffrage string, term, applied, commit uint64) client.ShardStatus {
		s := client.ShardStatus{ID: 2, RaftState: state, Suffrage: suffrage, Term: term, AppliedIndex: applied, CommitIndex: commit}
		if suffrage != "none" {
			s.Group, s.ConfigIndex, s.ConfigCommitted = group, 90, true
		}
		return s
	}
	node := func(shards ...client.ShardStatus) nodeAnswer { return nodeAnswer{st: client.Status{Shards: shards}} }
	sh := client.ClusterShard{ID: 2, Replicas: []string{"a", "b", "c", "d", "e", "f", "g"}}
	answers := map[string]nodeAnswer{
		"a": node(st("Leader", "voter", 3, 100, 100)), // deposed: an older term
		"b": node(st("Leader", "voter", 4, 118, 120)),
		"c": node(st("Follower", "voter", 4, 117, 120)),
		"d": node(), // answered, no replica yet
		// e: no answer
		"f": node(st("Follower", "none", 4, 80, 80)),      // in the map, not in the group
		"g": node(st("Follower", "nonvoter", 4, 70, 120)), // catching up
	}
	got := shardHealth(sh, answers)
	var labels, roles []string
	for _, r := range got.Replicas {
		labels = append(labels, r.Node+" ("+replicaLabel(r)+")")
		roles = append(roles, r.Role)
	}
	want := "a (lag 20) b (leader) c (lag 3) d (starting) e (down) f (not a member) g (nonvoter, lag 50)"
	if got.Leader != "b" || strings.Join(labels, " ") != want {
		t.Fatalf("leader %q, replicas %q; want b, %q", got.Leader, strings.Join(labels, " "), want)
	}
	wantRoles := "voter,voter,voter,not a member,not a member,not a member,nonvoter"
	if strings.Join(roles, ",") != wantRoles {
		t.Errorf("roles %v, want %s (by the leader's configuration)", roles, wantRoles)
	}
	if g := groupLabel(got); g != "a b c g(nonvoter)" || got.ConfigIndex != 90 {
		t.Errorf("group %q at %d, want the leader's: a b c g(nonvoter) at 90", g, got.ConfigIndex)
	}

	// Without the leader's answer, the followers' lag is unknown and the
	// roles are the replicas' own views.
	delete(answers, "b")
	answers["c"] = node(st("Candidate", "voter", 5, 117, 120))
	answers["a"] = node(func() client.ShardStatus {
		s := st("Leader", "voter", 3, 100, 100)
		s.ConfigCommitted = false
		return s
	}())
	got = shardHealth(sh, answers)
	labels, roles = labels[:0], roles[:0]
	for _, r := range got.Replicas {
		labels = append(labels, replicaLabel(r))
		roles = append(roles, r.Role)
	}
	if got.Leader != "a" || strings.Join(labels, ",") != "leader,down,candidate,starting,down,not a member,nonvoter, lag 30" {
		t.Fatalf("leader %q, replicas %v", got.Leader, labels)
	}
	if g := groupLabel(got); g != "a b c g(nonvoter) [uncommitted]" {
		t.Errorf("group %q of a leader whose configuration is not committed", g)
	}
	if g := groupLabel(clusterShardJSON{}); g != "-" {
		t.Errorf("group of a shard without a leader's answer: %q", g)
	}
}
