package cluster

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/l4xg/grid/cluster/topology"
)

// seal encrypts msg as memberlist v0.5.4 does (version 1: no padding).
func seal(t *testing.T, key, msg, aad []byte) []byte {
	t.Helper()
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, gcmNonce)
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	return append(append([]byte{1}, nonce...), gcm.Seal(nil, nonce, msg, aad)...)
}

// sealStream frames msg as an encrypted stream message.
func sealStream(t *testing.T, key, msg []byte) []byte {
	t.Helper()
	size := len(msg) + 1 + gcmNonce + gcmTag
	hdr := []byte{mlEncrypt, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[1:], uint32(size))
	return append(hdr, seal(t, key, msg, hdr)...)
}

// TestGossipGuardLooksInsideEncryption: with gossip encryption the guard
// decrypts what it can and checks it as plaintext, so that a member with
// the key cannot send memberlist the frames it would panic on; what no key
// opens is memberlist's to drop; plaintext is refused when incoming gossip
// is verified.
func TestGossipGuardLooksInsideEncryption(t *testing.T) {
	key, other := bytes.Repeat([]byte{7}, 16), bytes.Repeat([]byte{9}, 16)
	ring, err := memberlist.NewKeyring([][]byte{key}, key)
	if err != nil {
		t.Fatal(err)
	}
	g := &gossipCrypto{keyring: ring, verifyIncoming: true}
	good := frame(t, mlAlive, mlAliveMsg{Node: "a", Vsn: []uint8{1, 5, 2, 0, 0, 0}})
	bad := frame(t, mlAlive, mlAliveMsg{Node: "a", Vsn: []uint8{1, 5, 2}})
	for _, tc := range []struct {
		name string
		buf  []byte
		ok   bool
	}{
		{"encrypted alive", seal(t, key, good, nil), true},
		{"encrypted hostile alive", seal(t, key, bad, nil), false},
		{"another key's (memberlist drops it)", seal(t, other, bad, nil), true},
		{"labeled, encrypted hostile", labeled("l", seal(t, key, bad, []byte("l"))), false},
	} {
		if err := g.checkPacket(tc.buf); (err == nil) != tc.ok {
			t.Errorf("packet %s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	node := mlPushNodeState{Name: "a", Addr: []byte{127, 0, 0, 1}, Port: 7422, Vsn: []uint8{1, 5, 2, 0, 0, 0}}
	pp := frame(t, mlPushPull, mlPushPullHeader{Nodes: 1, Join: true}, node)
	for name, c := range map[string]struct {
		msg []byte
		ok  bool
	}{
		"encrypted push/pull":         {sealStream(t, key, pp), true},
		"encrypted compressed":        {sealStream(t, key, compressed(t, pp)), true},
		"plaintext while verified":    {pp, false},
		"another key's push/pull":     {sealStream(t, other, pp), false},
		"encrypted hostile push/pull": {sealStream(t, key, frame(t, mlPushPull, mlPushPullHeader{Nodes: -1})), false},
	} {
		if err := checkStreamWith(bytes.NewReader(c.msg), g); (err == nil) != c.ok {
			t.Errorf("stream %s: %v, want ok=%v", name, err, c.ok)
		}
	}
	for name, msg := range attackStreams(t) {
		if err := checkStreamWith(bytes.NewReader(sealStream(t, key, msg)), g); err == nil {
			t.Errorf("encrypted %s: accepted", name)
		}
	}
}

// TestParseGossipKeys: a key file of base64 keys, the primary first;
// comments and blank lines skipped; a bad line named.
func TestParseGossipKeys(t *testing.T) {
	k1, k2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)), base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 16))
	keys, err := ParseGossipKeys("# primary first\n" + k1 + "\n\n" + k2 + "\n")
	if err != nil || len(keys) != 2 || keys[0][0] != 1 || keys[1][0] != 2 {
		t.Fatalf("%v %v", keys, err)
	}
	for text, want := range map[string]string{
		"":                       "no key",
		"not base64!":            "line 1",
		k1 + "\n" + "c2hvcnQ=\n": "line 2",
	} {
		if _, err := ParseGossipKeys(text); err == nil || !strings.Contains(err.Error(), want) {
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
		m, err := NewMembership(MembershipConfig{NodeID: "a", BindAddr: "127.0.0.1:0",
			Logger: slog.New(slog.DiscardHandler), Timing: FastGossipTiming(),
			Encryption:  &GossipEncryption{Keys: keys, VerifyIncoming: true, VerifyOutgoing: true},
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
	if _, err := m.GossipKeyring(topology.KeyringInstall, k2); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GossipKeyring(topology.KeyringUse, k2); err != nil {
		t.Fatal(err)
	}
	m.Shutdown()
	m = start(k3)
	defer m.Shutdown()
	keys, err := m.GossipKeyring(topology.KeyringList, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !bytes.Equal(keys[0], k2) || !bytes.Equal(keys[1], k1) {
		t.Fatalf("after a restart the keyring is %x, want k2 (primary) and k1 from the file", keys)
	}
	if _, err := m.GossipKeyring(topology.KeyringRemove, k2); err == nil {
		t.Fatal("removed the primary key")
	}
}
