package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// cli runs one invocation and returns its exit code and outputs.
func cli(t *testing.T, verb string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runCLI(verb, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// oneJSON decodes stdout, which must hold exactly one JSON object.
func oneJSON(t *testing.T, stdout string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, stdout)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("more than one JSON value on stdout:\n%s", stdout)
	}
	return m
}

func TestCLIVerbs(t *testing.T) {
	verbs := cliVerbs()
	want := []string{"reserve", "complete", "fail", "release", "extend", "get", "forget", "status", "audit", "locate", "drain"}
	if !slices.Equal(verbs, want) {
		t.Fatalf("verbs %v", verbs)
	}
	if len(cliTable) != len(verbs) {
		t.Fatalf("%d verbs in the table, %d listed", len(cliTable), len(verbs))
	}
	for _, v := range verbs {
		if u := cliUsage(v); !strings.HasPrefix(u, "gridnode "+v) {
			t.Errorf("usage of %s: %q", v, u)
		}
		if code, _, stderr := cli(t, v, "-h"); code != 0 || !strings.Contains(stderr, "-addr") {
			t.Errorf("%s -h: exit %d, usage %q", v, code, stderr)
		}
	}
	if cliUsage("serve") != "" {
		t.Error("serve is not a CLI verb")
	}
}

func TestCLIInvalidInput(t *testing.T) {
	addr := gridtest.ClosedAddr(t) // nothing must be sent: a send would exit 2
	for _, tc := range []struct {
		verb string
		args []string
		want string
	}{
		{"reserve", nil, "missing --ns"},
		{"reserve", []string{"--ns", "a"}, "missing --key"},
		{"get", []string{"--key", "k"}, "missing --ns"},
		{"complete", []string{"--ns", "a", "--key", "k"}, "missing --token"},
		{"extend", []string{"--ns", "a", "--key", "k", "--token", "x"}, `invalid value "x" for flag -token`},
		{"reserve", []string{"--ns", "a", "--key", "k", "--bogus"}, "flag provided but not defined: -bogus"},
		{"reserve", []string{"--ns", "a", "--key", "k", "--fingerprint", "xyz"}, "invalid --fingerprint"},
		{"reserve", []string{"--ns", "a", "--key", "k", "--fingerprint", "11112222333344445"}, "invalid --fingerprint"},
		{"reserve", []string{"--ns", "a", "--key", "k", "--entity", "order-1"}, "--entity and --version go together"},
		{"reserve", []string{"--ns", "a", "--key", "k", "--version", "3"}, "--entity and --version go together"},
		{"reserve", []string{"--ns", "a", "--key", "k", "--lease", "0s"}, "--lease must be positive"},
		{"reserve", []string{"--ns", "a", "--key", "k", "--max-attempts", "0"}, "--max-attempts"},
		{"fail", []string{"--ns", "a", "--key", "k", "--token", "9", "--retry-after", "1s", "--poison"}, "exclude each other"},
		{"fail", []string{"--ns", "a", "--key", "k", "--token", "9", "--retry-after", "-1s"}, "--retry-after must not be negative"},
		{"complete", []string{"--ns", "a", "--key", "k", "--token", "9", "--retain", "0s"}, "--retain must be positive"},
		{"status", []string{"extra"}, `unexpected argument "extra"`},
		{"locate", []string{"--key", "k"}, "missing --ns"},
		{"locate", []string{"--ns", "a"}, "missing --key"},
		{"status", []string{"--timeout", "0s"}, "--timeout must be positive"},
		{"frobnicate", nil, `unknown command "frobnicate"`},
	} {
		args := append([]string{"--addr", addr}, tc.args...)
		code, stdout, stderr := cli(t, tc.verb, args...)
		if code != 1 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%s %v: exit %d, stderr %q, stdout %q; want exit 1 naming %q", tc.verb, tc.args, code, stderr, stdout, tc.want)
		}
	}
}

func TestCLIUnreachableGrid(t *testing.T) {
	addr := gridtest.ClosedAddr(t)
	for _, args := range [][]string{
		{"status"},
		{"reserve", "--ns", "a", "--key", "k"},
		{"complete", "--ns", "a", "--key", "k", "--token", "7"},
		{"get", "--ns", "a", "--key", "k", "--stale-ok"},
	} {
		start := time.Now()
		code, stdout, stderr := cli(t, args[0], append(args[1:], "--addr", addr, "--timeout", "2s")...)
		// Unavailable, or the --timeout deadline on a loaded machine.
		if code != 2 || !strings.Contains(stderr, "unavailable") && !strings.Contains(stderr, "deadline exceeded") || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit 2", args, code, stderr, stdout)
		}
		// Not a speed check: the CLI must give up at its deadline rather
		// than retry on, so only a wide margin is allowed.
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%v: took %v, far beyond --timeout 2s", args, d)
		}
	}
	code, stdout, _ := cli(t, "reserve", "--addr", addr, "--ns", "a", "--key", "k", "--json")
	if code != 2 {
		t.Fatalf("exit %d", code)
	}
	m := oneJSON(t, stdout)
	if m["exit_code"] != float64(2) || !strings.Contains(m["error"].(string), "unavailable") {
		t.Fatalf("error object %v", m)
	}
}

func TestCLIAgainstAGrid(t *testing.T) {
	n := gridtest.Start(t)
	base := []string{"--addr", n.Addr(), "--ns", "cli", "--key", "order-1"}
	run := func(verb string, args ...string) (int, string, string) {
		return cli(t, verb, append(slices.Clone(base), args...)...)
	}

	code, stdout, stderr := run("reserve", "--json", "--lease", "1m", "--fingerprint", "0xbeef")
	if code != 0 {
		t.Fatalf("reserve: exit %d: %s", code, stderr)
	}
	m := oneJSON(t, stdout)
	if m["outcome"] != "ACQUIRED" || m["state"] != "PROCESSING" || m["attempt"] != float64(1) || m["fingerprint"] != "000000000000beef" {
		t.Fatalf("reserve: %v", m)
	}
	token, ok := m["token"].(float64)
	if !ok || token <= 0 {
		t.Fatalf("token %v", m["token"])
	}
	deadline, err := time.Parse(time.RFC3339, m["deadline"].(string))
	if err != nil || time.Until(deadline) < 50*time.Second {
		t.Fatalf("deadline %v: %v", m["deadline"], err)
	}
	for _, absent := range []string{"completed_at", "result", "retry_after"} {
		if _, ok := m[absent]; ok {
			t.Errorf("reserve: %q present: %v", absent, m)
		}
	}
	tok := strconv.FormatUint(uint64(token), 10)

	code, stdout, _ = run("reserve", "--json")
	if m := oneJSON(t, stdout); code != 0 || m["outcome"] != "BUSY" || m["retry_after"] == nil {
		t.Fatalf("second reserve: exit %d %v", code, m)
	}

	code, stdout, _ = run("extend", "--token", tok, "--lease", "2m")
	if code != 0 || !strings.Contains(stdout, "OUTCOME") || !strings.Contains(stdout, "OK") {
		t.Fatalf("extend: exit %d\n%s", code, stdout)
	}

	// A wrong token: the grid answered LEASE_LOST, which exits 3.
	code, stdout, _ = run("complete", "--json", "--token", strconv.FormatUint(uint64(token)+1, 10))
	if m := oneJSON(t, stdout); code != exitLeaseLost || m["outcome"] != "LEASE_LOST" {
		t.Fatalf("complete with a stale token: exit %d %v", code, m)
	}

	code, _, stderr = run("complete", "--token", tok, "--result", "shipped", "--retain", "1h")
	if code != 0 {
		t.Fatalf("complete: exit %d: %s", code, stderr)
	}
	code, stdout, _ = run("get", "--json")
	m = oneJSON(t, stdout)
	if code != 0 || m["outcome"] != "OK" || m["state"] != "COMPLETED" || m["result"] != "shipped" {
		t.Fatalf("get: exit %d %v", code, m)
	}
	if _, err := time.Parse(time.RFC3339, m["completed_at"].(string)); err != nil {
		t.Fatalf("completed_at: %v", err)
	}

	code, stdout, _ = run("reserve")
	if code != 0 || !strings.Contains(stdout, "DUPLICATE") || !strings.Contains(stdout, `"shipped"`) {
		t.Fatalf("duplicate (table): exit %d\n%s", code, stdout)
	}

	code, stdout, _ = run("forget", "--json")
	if m := oneJSON(t, stdout); code != 0 || m["existed"] != true {
		t.Fatalf("forget: exit %d %v", code, m)
	}

	// Invalid input refused by the grid: exit 1, naming the limit.
	long := strings.Repeat("k", 2000)
	code, _, stderr = cli(t, "reserve", "--addr", n.Addr(), "--ns", "cli", "--key", long)
	if code != 1 || !strings.Contains(stderr, "limit 1024") {
		t.Fatalf("long key: exit %d: %s", code, stderr)
	}
	code, _, stderr = cli(t, "reserve", "--addr", n.Addr(), "--ns", "Not A Namespace", "--key", "k")
	if code != 1 || !strings.Contains(stderr, "invalid argument") {
		t.Fatalf("bad namespace: exit %d: %s", code, stderr)
	}

	// Fail, then poison.
	_, stdout, _ = run("reserve", "--json")
	tok = strconv.FormatFloat(oneJSON(t, stdout)["token"].(float64), 'f', 0, 64)
	code, stdout, _ = run("fail", "--json", "--token", tok, "--poison")
	if m := oneJSON(t, stdout); code != 0 || m["state"] != "POISONED" {
		t.Fatalf("fail --poison: exit %d %v", code, m)
	}
	code, stdout, _ = run("release", "--json", "--token", tok)
	if m := oneJSON(t, stdout); code != exitLeaseLost || m["outcome"] != "LEASE_LOST" {
		t.Fatalf("release of a settled key: exit %d %v", code, m)
	}

	code, stdout, stderr = cli(t, "status", "--addr", n.Addr())
	if code != 0 || !strings.Contains(stdout, "SHARD") || !strings.Contains(stdout, "Leader") {
		t.Fatalf("status: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, "status", "--addr", n.Addr(), "--json")
	m = oneJSON(t, stdout)
	if shards, ok := m["shards"].([]any); code != 0 || !ok || len(shards) == 0 || m["slots"] == nil {
		t.Fatalf("status json: exit %d %v", code, m)
	}
	if _, ok := m["map_epoch"]; ok {
		t.Fatalf("status json of a standalone node shows a cluster: %v", m)
	}

	// A standalone node has nothing to drain.
	code, _, stderr = cli(t, "drain", "--addr", n.Addr())
	if code != 1 || !strings.Contains(stderr, "standalone") {
		t.Fatalf("drain of a standalone node: exit %d: %s", code, stderr)
	}
}

// TestCLIAudit: records moved to the cold tier past the hot window are
// listed by audit (by namespace and time range, digests in hex), and get
// finds them by key or by the listed digest, saying which tier answered.
func TestCLIAudit(t *testing.T) {
	var nowMs atomic.Int64
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	nowMs.Store(start.UnixMilli())
	n := gridtest.Start(t, gridtest.Options{Shards: 2, TickInterval: 20 * time.Millisecond,
		Clock: func() time.Time { return time.UnixMilli(nowMs.Load()) }})
	ctx := context.Background()
	c, err := client.Dial(ctx, n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	settle := func(ns, key string) {
		r, err := c.Reserve(ctx, ns, key)
		if err != nil || r.Outcome != client.OutcomeAcquired {
			t.Fatalf("reserve %s/%s: %v %v", ns, key, r.Outcome, err)
		}
		if _, err := c.Complete(ctx, ns, key, r.Token, client.WithResult([]byte("receipt "+key))); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		settle("audit", k)
	}
	settle("other", "k1")

	code, stdout, _ := cli(t, "get", "--addr", n.Addr(), "--ns", "audit", "--key", "k1", "--json")
	if m := oneJSON(t, stdout); code != 0 || m["tier"] != "hot" {
		t.Fatalf("get inside the hot window: exit %d %v", code, m)
	}
	nowMs.Add((25 * time.Hour).Milliseconds())
	waitCold(t, c, 4)

	code, stdout, stderr := cli(t, "audit", "--addr", n.Addr(), "--ns", "audit", "--json",
		"--since", start.Add(-time.Hour).Format(time.RFC3339), "--until", start.Add(time.Hour).Format(time.RFC3339))
	if code != 0 {
		t.Fatalf("audit: exit %d: %s", code, stderr)
	}
	var digests []string
	for line := range strings.Lines(stdout) {
		m := oneJSON(t, line)
		if m["state"] != "COMPLETED" || !strings.HasPrefix(m["result"].(string), "receipt k") {
			t.Fatalf("audit line %v", m)
		}
		digests = append(digests, m["digest"].(string))
	}
	if len(digests) != 3 {
		t.Fatalf("audit listed %d records of namespace audit, want 3:\n%s", len(digests), stdout)
	}
	code, stdout, _ = cli(t, "audit", "--addr", n.Addr(), "--ns", "audit", "--json", "--since", start.Add(time.Hour).Format(time.RFC3339))
	if code != 0 || stdout != "" {
		t.Fatalf("audit of a range after the records: exit %d\n%s", code, stdout)
	}

	code, stdout, _ = cli(t, "get", "--addr", n.Addr(), "--digest", digests[0], "--json")
	if m := oneJSON(t, stdout); code != 0 || m["tier"] != "cold" || m["state"] != "COMPLETED" ||
		!strings.HasPrefix(m["result"].(string), "receipt k") || m["attempt"] != float64(1) || m["completed_at"] == nil {
		t.Fatalf("get --digest: exit %d %v", code, m)
	}
	code, stdout, _ = cli(t, "get", "--addr", n.Addr(), "--ns", "audit", "--key", "k2")
	if code != 0 || !strings.Contains(stdout, "TIER") || !strings.Contains(stdout, "cold") {
		t.Fatalf("get by key after demotion: exit %d\n%s", code, stdout)
	}
	code, _, stderr = cli(t, "get", "--addr", n.Addr(), "--digest", "xyz")
	if code != 1 || !strings.Contains(stderr, "32 hex digits") {
		t.Fatalf("get with a bad digest: exit %d: %s", code, stderr)
	}
	code, _, stderr = cli(t, "get", "--addr", n.Addr(), "--digest", digests[0], "--ns", "audit")
	if code != 1 || !strings.Contains(stderr, "--digest replaces") {
		t.Fatalf("get with --digest and --ns: exit %d: %s", code, stderr)
	}
}

// waitCold waits until the node's cold tiers hold n records.
func waitCold(t *testing.T, c *client.Client, n uint64) {
	t.Helper()
	testwait.Until(t, 20*time.Second, func() string {
		s, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var cold uint64
		for _, sh := range s.Shards {
			cold += sh.ColdKeys
		}
		if cold == n {
			return ""
		}
		return fmt.Sprintf("cold tier holds %d records, want %d", cold, n)
	})
}

// TestCLILocate: on a real 3-node cluster (in-process), locate names the
// shard a key lives on by the cluster map (the same as the nodes route
// by), the node leading it, and its three replicas, through any node; an
// entity moves the key to its entity's shard; the table says the same.
func TestCLILocate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{})
	addrs := c.Addrs()
	m := c.Map()
	for i, key := range []string{"k0", "k1", "k2", "k3", "k4", "k5"} {
		code, stdout, stderr := cli(t, "locate", "--addr", addrs[i%3], "--ns", "cli", "--key", key, "--json")
		j := oneJSON(t, stdout)
		d := digest.Record("cli", []byte(key), nil)
		s := c.ShardOf("cli", key)
		if code != 0 || j["digest"] != d.String() || j["slot"] != float64(d.Slot(m.Slots)) || j["shard"] != float64(s) {
			t.Fatalf("locate %s: exit %d %v %s; want digest %s slot %d shard %d", key, code, j, stderr, d, d.Slot(m.Slots), s)
		}
		reps := j["replicas"].([]any)
		if len(reps) != 3 || j["map_epoch"].(float64) < 1 {
			t.Fatalf("locate %s: %v", key, j)
		}
		for k, r := range reps {
			if id := r.(map[string]any)["id"]; id != string(m.ShardReplicas[s][k]) {
				t.Errorf("locate %s: replica %d is %v, the map says %s", key, k, id, m.ShardReplicas[s][k])
			}
		}
		// The leader the node names is the one that leads, once the
		// cluster is settled.
		testwait.For(t, 30*time.Second, "a single leader of shard "+strconv.Itoa(s), func() bool { return len(c.Leaders(s)) == 1 })
		code, stdout, _ = cli(t, "locate", "--addr", addrs[i%3], "--ns", "cli", "--key", key, "--json")
		j = oneJSON(t, stdout)
		if l := c.Leaders(s); code != 0 || len(l) != 1 || j["leader_id"] != c.ID(l[0]) || j["leader_addr"] != addrs[l[0]] {
			t.Errorf("locate %s: leader %v at %v, the shard is led by %v", key, j["leader_id"], j["leader_addr"], l)
		}
	}
	// An entity places the key by the entity.
	d := digest.Record("cli", []byte("k0"), []byte("order-7"))
	code, stdout, _ := cli(t, "locate", "--addr", addrs[0], "--ns", "cli", "--key", "k0", "--entity", "order-7", "--json")
	if j := oneJSON(t, stdout); code != 0 || j["digest"] != d.String() || j["shard"] != float64(m.ShardOf(d)) || j["entity"] != "order-7" {
		t.Fatalf("locate with an entity: exit %d %v, want digest %s", code, j, d)
	}
	code, stdout, stderr := cli(t, "locate", "--addr", addrs[1], "--ns", "cli", "--key", "k0")
	s := c.ShardOf("cli", "k0")
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("shard %d  map epoch", s)) || !strings.Contains(stdout, "REPLICA") ||
		strings.Count(stdout, "127.0.0.1:") != 4 || !strings.Contains(stdout, "(preferred)") {
		t.Fatalf("locate table: exit %d\n%s%s", code, stdout, stderr)
	}
}
