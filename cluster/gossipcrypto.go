package cluster

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"

	"github.com/l4xg/grid/internal/dirsync"
)

// GossipEncryption encrypts the gossip traffic with memberlist's keyring
// (AES-GCM; Consul's model). Keys are 16, 24 or 32 bytes; the first is the
// primary, which encrypts; every key decrypts. VerifyIncoming refuses
// plaintext gossip, VerifyOutgoing sends encrypted gossip: a cluster moving
// to encryption turns on the keys with both off, then VerifyOutgoing on
// every node, then VerifyIncoming.
type GossipEncryption struct {
	Keys                           [][]byte
	VerifyIncoming, VerifyOutgoing bool
}

// ParseGossipKeys reads a key file: one base64 key a line (blank lines and
// lines starting with # are skipped), the primary first.
func ParseGossipKeys(text string) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("cluster: gossip key on line %d: not base64: %w", i+1, err)
		}
		if err := memberlist.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("cluster: gossip key on line %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("cluster: the gossip key file holds no key")
	}
	return keys, nil
}

// writeKeyring stores keys (the primary first) in path, one base64 key a
// line, replaced atomically and durably: a crash after a rotation never
// brings the node back with the key the others have dropped.
func writeKeyring(path string, keys [][]byte) error {
	var b strings.Builder
	b.WriteString("# gossip keyring, the primary first: written by gridnode on every change\n")
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	return dirsync.WriteFile(path, []byte(b.String()), 0o600)
}

// gossipCrypto is what the gossip guard needs to look inside encrypted
// frames: the keyring memberlist uses (so rotations are followed) and
// whether plaintext is refused anyway.
type gossipCrypto struct {
	keyring        *memberlist.Keyring
	verifyIncoming bool
}

// memberlist v0.5.4's encryption format (security.go): a version byte (0:
// PKCS7-padded, 1: not), a 12-byte nonce, the AES-GCM ciphertext and its
// 16-byte tag; the additional data is the packet's label, or a stream
// message's type byte, length and label.
const (
	gcmNonce = 12
	gcmTag   = 16
)

// decrypt opens msg with any key of the ring.
func (g *gossipCrypto) decrypt(msg, aad []byte) ([]byte, error) {
	if len(msg) == 0 || msg[0] > 1 {
		return nil, errors.New("not an encrypted gossip message")
	}
	vsn := msg[0]
	min := 1 + gcmNonce + gcmTag
	if vsn == 0 {
		min += aes.BlockSize
	}
	if len(msg) < min {
		return nil, errors.New("encrypted gossip message too short")
	}
	for _, key := range g.keyring.GetKeys() {
		block, err := aes.NewCipher(key)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		plain, err := gcm.Open(nil, msg[1:1+gcmNonce], msg[1+gcmNonce:], aad)
		if err != nil {
			continue
		}
		if vsn == 0 {
			// PKCS7: memberlist slices by the last byte without checking it.
			n := len(plain)
			if n == 0 || int(plain[n-1]) == 0 || int(plain[n-1]) > n || int(plain[n-1]) > aes.BlockSize {
				return nil, refuse("encrypted gossip message with bad padding")
			}
			plain = plain[:n-int(plain[n-1])]
		}
		return plain, nil
	}
	return nil, errors.New("no gossip key opens the message")
}

// checkPacket checks a packet as memberlist would read it with encryption
// on: decrypted, then checked like plaintext. One that no key opens is
// memberlist's to drop (VerifyIncoming) or to read as plaintext.
func (g *gossipCrypto) checkPacket(buf []byte) error {
	label := []byte(nil)
	body := buf
	if len(body) >= 2 && body[0] == mlHasLabel {
		if len(body) < 2+int(body[1]) {
			return refuse("truncated label header")
		}
		label, body = body[2:2+int(body[1])], body[2+int(body[1]):]
	}
	plain, err := g.decrypt(body, label)
	switch {
	case errors.Is(err, ErrGossipFrame):
		return err
	case err == nil:
		return checkPacket(plain)
	case g.verifyIncoming:
		return nil // memberlist drops what it cannot decrypt
	default:
		return checkPacket(buf)
	}
}

// checkEncryptedStream checks an encrypted stream message whose type byte
// (mlEncrypt) and label have been read: it reads the length and the
// payload, as memberlist's decryptRemoteState does, decrypts it and checks
// the message inside.
func (g *gossipCrypto) checkEncryptedStream(br *bufio.Reader, label []byte) error {
	var n [4]byte
	if _, err := io.ReadFull(br, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxGossipStream {
		return refuse("encrypted stream message of %d bytes", size)
	}
	msg := make([]byte, size)
	if _, err := io.ReadFull(br, msg); err != nil {
		return err
	}
	aad := append([]byte{mlEncrypt}, n[:]...)
	aad = append(aad, label...)
	plain, err := g.decrypt(msg, aad)
	if err != nil {
		if errors.Is(err, ErrGossipFrame) {
			return err
		}
		return refuse("encrypted stream message: %v", err)
	}
	if len(plain) == 0 {
		return refuse("empty encrypted stream message")
	}
	return checkStreamBody(plain[0], bufio.NewReader(bytes.NewReader(plain[1:])), nil, nil)
}

// SetGossipKeys replaces the keyring's keys with keys, the first the
// primary, without a moment where a key still in use is missing: new keys
// are installed, the primary switched, then the keys not in keys removed.
func setGossipKeys(ring *memberlist.Keyring, keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("cluster: no gossip key")
	}
	for _, k := range keys {
		if err := ring.AddKey(k); err != nil {
			return err
		}
	}
	if err := ring.UseKey(keys[0]); err != nil {
		return err
	}
	for _, old := range ring.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := ring.RemoveKey(old); err != nil {
				return err
			}
		}
	}
	return nil
}
