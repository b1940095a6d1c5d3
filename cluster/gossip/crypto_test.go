package gossip

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"testing"

	"github.com/hashicorp/memberlist"
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
	g := &cryptoGuard{keyring: ring, verifyIncoming: true}
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
