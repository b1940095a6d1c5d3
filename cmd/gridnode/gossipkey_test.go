package main

import (
	"bytes"
	"encoding/base64"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestGossipKeysReloadOnSIGHUP: gossip-keygen makes keys a key file takes;
// a reload installs the file's keys as they are now, the first the
// primary, and a file that does not parse is refused, naming it.
func TestGossipKeysReloadOnSIGHUP(t *testing.T) {
	var k1, k2 bytes.Buffer
	if gossipKeygen(&k1, io.Discard) != 0 || gossipKeygen(&k2, io.Discard) != 0 || k1.String() == k2.String() {
		t.Fatalf("gossip-keygen: %q %q", k1.String(), k2.String())
	}
	file := filepath.Join(t.TempDir(), "gossip.keys")
	writeFile(t, file, k1.String())
	args := []string{"--gossip-key-file", file, "--bootstrap-expect", "1"}
	f := newServeFlags(io.Discard)
	s, err := f.load(args, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	var logs syncBuffer
	r := &reloader{args: args, env: func(string) (string, bool) { return "", false }, current: s,
		level: new(slog.LevelVar), host: noTierPolicy{}, log: slog.New(slog.NewTextHandler(&logs, nil)),
		gossipKeys: func(keys [][]byte) error { got = keys; return nil }}
	writeFile(t, file, k2.String()+k1.String())
	r.reload()
	want, err := gossip.ParseKeys(k2.String() + k1.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0], want[0]) || !bytes.Equal(got[1], want[1]) {
		t.Fatalf("reload installed %d keys, want the file's two, the new one first\n%s", len(got), logs.String())
	}
	writeFile(t, file, "not a key\n")
	r.reload()
	if !strings.Contains(logs.String(), "config reload refused: gossip keys") || !strings.Contains(logs.String(), "line 1") {
		t.Fatalf("a bad key file: %s", logs.String())
	}
}

type noTierPolicy struct{}

func (noTierPolicy) SetTierPolicy(time.Duration, int64) error { return nil }

// TestGossipKeyCLIRotatesTheCluster: gridnode gossip-key install, use and
// remove rotate every node's gossip key in a live 3-node cluster, list
// shows the same keyring everywhere, and every node keeps seeing the
// others alive.
func TestGossipKeyCLIRotatesTheCluster(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{4}, 32), bytes.Repeat([]byte{5}, 32)
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{Nodes: 3, Replicas: 3, Shards: 2,
		GossipEncryption: func(int) *gossip.Encryption {
			return &gossip.Encryption{Keys: [][]byte{k1}, VerifyIncoming: true, VerifyOutgoing: true}
		}})
	if err := c.AwaitStable(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := gossipKeyCmd(append(args, "--addr", c.Addrs()[0]), &out, &errb); code != 0 {
			t.Fatalf("gossip-key %v: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	fp1, fp2 := api.KeyFingerprint(k1), api.KeyFingerprint(k2)
	for _, step := range []struct {
		args    []string
		primary string
		keys    int
	}{
		{[]string{"list"}, fp1, 1},
		{[]string{"install", "--key", b64(k2)}, fp1, 2},
		{[]string{"use", "--key", b64(k2)}, fp2, 2},
		{[]string{"remove", "--key", b64(k1)}, fp2, 1},
	} {
		out := run(step.args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 {
			t.Fatalf("gossip-key %v: %d nodes answered, want 3:\n%s", step.args, len(lines), out)
		}
		for _, l := range lines {
			if !strings.Contains(l, "primary "+step.primary) || strings.Count(l[strings.Index(l, "keys "):], ",") != step.keys-1 {
				t.Errorf("gossip-key %v: %q, want primary %s and %d keys", step.args, l, step.primary, step.keys)
			}
		}
		for i := range 3 {
			if n := len(c.Node(i).Cluster().Alive()); n != 3 {
				t.Fatalf("after gossip-key %v node %d sees %d alive", step.args, i, n)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := gossipKeyCmd([]string{"remove", "--key", b64(k2), "--addr", c.Addrs()[0]}, &out, &errb); code == 0 {
		t.Errorf("removing the primary key: exit 0, want refused:\n%s", out.String())
	}
}
