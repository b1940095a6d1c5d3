package gossip

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/l4xg/grid/cluster/topology"
)

// TestParseKeys: a key file of base64 keys, the primary first;
// comments and blank lines skipped; a bad line named.
func TestParseKeys(t *testing.T) {
	k1, k2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)), base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 16))
	keys, err := ParseKeys("# primary first\n" + k1 + "\n\n" + k2 + "\n")
	if err != nil || len(keys) != 2 || keys[0][0] != 1 || keys[1][0] != 2 {
		t.Fatalf("%v %v", keys, err)
	}
	for text, want := range map[string]string{
		"":                       "no key",
		"not base64!":            "line 1",
		k1 + "\n" + "c2hvcnQ=\n": "line 2",
	} {
		if _, err := ParseKeys(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", text, err, want)
		}
	}
}

// TestKeyringSurvivesRestart: a keyring change made at run time is kept in
// KeyringFile, and a node started again reads it there rather than the
// keys it was configured with.
func TestKeyringSurvivesRestart(t *testing.T) {
	k1, k2, k3 := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16), bytes.Repeat([]byte{3}, 16)
	file := filepath.Join(t.TempDir(), "gossip.keyring")
	start := func(keys ...[]byte) *Membership {
		m, err := New(Config{NodeID: "a", BindAddr: "127.0.0.1:0",
			Logger: slog.New(slog.DiscardHandler), Timing: FastTiming(),
			Encryption:  &Encryption{Keys: keys, VerifyIncoming: true, VerifyOutgoing: true},
			KeyringFile: file})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := start(k1)
	if _, err := m.Keyring(topology.KeyringInstall, k2); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Keyring(topology.KeyringUse, k2); err != nil {
		t.Fatal(err)
	}
	m.Shutdown()
	m = start(k3)
	defer m.Shutdown()
	keys, err := m.Keyring(topology.KeyringList, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !bytes.Equal(keys[0], k2) || !bytes.Equal(keys[1], k1) {
		t.Fatalf("after a restart the keyring is %x, want k2 (primary) and k1 from the file", keys)
	}
	if _, err := m.Keyring(topology.KeyringRemove, k2); err == nil {
		t.Fatal("removed the primary key")
	}
}
