package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/digest"
)

// TestCLISettleWithoutTheEntity, through the CLI as a separate process
// against a real "gridnode serve" process: a key reserved with --entity
// lives on its entity's shard, which is not the key's own. get without
// --entity says which shard it asked and how to name the entity;
// complete --token T without --entity completes the key, and the entity's
// version is committed (a lower one is STALE); a lost token answers
// LEASE_LOST (exit 3) and says on stderr that nothing changed.
func TestCLISettleWithoutTheEntity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gridnode processes")
	}
	// Several shards, so that an entity can move a key to another one.
	p := startServe(t, t.TempDir(), "--shards", "8")
	c, err := client.Dial(context.Background(), p.addr, client.WithoutRouting())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.ClusterMap(context.Background())
	if err != nil || m.ShardCount < 2 {
		t.Fatalf("cluster map: %+v %v", m, err)
	}
	shardOf := func(d digest.Digest) int {
		return int(uint64(d.Slot(uint32(m.Slots))) * uint64(m.ShardCount) / uint64(m.Slots))
	}
	var key, entity string
	for i := 0; key == ""; i++ {
		k, e := fmt.Sprintf("evt-%d", i), fmt.Sprintf("order-%d", i)
		if shardOf(digest.Record("cli", []byte(k), nil)) != shardOf(digest.Record("cli", []byte(k), []byte(e))) {
			key, entity = k, e
		}
	}
	own, placed := shardOf(digest.Record("cli", []byte(key), nil)), shardOf(digest.Record("cli", []byte(key), []byte(entity)))
	base := []string{"--addr", p.addr, "--ns", "cli", "--key", key}
	run := func(verb string, args ...string) (int, string, string) {
		return cliProc(t, verb, append(append([]string{}, base...), args...)...)
	}

	code, stdout, stderr := run("reserve", "--json", "--entity", entity, "--version", "5")
	if code != 0 {
		t.Fatalf("reserve: exit %d: %s", code, stderr)
	}
	tok := strconv.FormatFloat(oneJSON(t, stdout)["token"].(float64), 'f', 0, 64)

	// get by the key alone: ABSENT there, and it says so.
	code, stdout, stderr = run("get")
	if code != 0 || !strings.Contains(stdout, "ABSENT") || !regexp.MustCompile(fmt.Sprintf(`SHARD ASKED +%d \(by the key\)`, own)).MatchString(stdout) ||
		!strings.Contains(stdout, "pass --entity") {
		t.Fatalf("get without --entity: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = run("get", "--json")
	if j := oneJSON(t, stdout); code != 0 || j["state"] != "ABSENT" || j["shard"] != float64(own) || j["asked_by"] != "key" || !strings.Contains(j["note"].(string), "--entity") {
		t.Fatalf("get --json without --entity: exit %d %v", code, j)
	}
	code, stdout, _ = run("get", "--json", "--entity", entity)
	if j := oneJSON(t, stdout); code != 0 || j["state"] != "PROCESSING" || j["shard"] != float64(placed) || j["asked_by"] != "entity" || j["note"] != nil {
		t.Fatalf("get --json --entity: exit %d %v", code, j)
	}

	// A lost token: LEASE_LOST, exit 3, and stderr says nothing changed.
	lost := strconv.FormatUint(mustUint(t, tok)+uint64(m.ShardCount), 10)
	code, stdout, stderr = run("complete", "--json", "--token", lost)
	if j := oneJSON(t, stdout); code != exitLeaseLost || j["outcome"] != "LEASE_LOST" || j["state"] != "PROCESSING" || !strings.Contains(stderr, "nothing changed") {
		t.Fatalf("complete with a lost token: exit %d %v %q", code, j, stderr)
	}

	// complete --token T without --entity completes the key.
	code, stdout, stderr = run("complete", "--json", "--token", tok, "--result", "shipped")
	if j := oneJSON(t, stdout); code != 0 || j["outcome"] != "OK" || j["state"] != "COMPLETED" || stderr != "" {
		t.Fatalf("complete without --entity: exit %d %v %q", code, j, stderr)
	}
	code, stdout, _ = run("get", "--json", "--entity", entity)
	if j := oneJSON(t, stdout); code != 0 || j["state"] != "COMPLETED" || j["result"] != "shipped" {
		t.Fatalf("get after complete: exit %d %v", code, j)
	}
	code, stdout, _ = cliProc(t, "reserve", "--addr", p.addr, "--ns", "cli", "--key", key+"-older", "--entity", entity, "--version", "4", "--json")
	if j := oneJSON(t, stdout); code != 0 || j["outcome"] != "STALE" {
		t.Fatalf("reserve of version 4 after version 5 completed: exit %d %v", code, j)
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
