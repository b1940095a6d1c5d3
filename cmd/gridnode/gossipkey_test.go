package main

import (
	"bytes"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/cluster"
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
	want, err := cluster.ParseGossipKeys(k2.String() + k1.String())
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
