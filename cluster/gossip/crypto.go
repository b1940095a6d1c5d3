package gossip

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"io"
	"sync/atomic"

	"github.com/hashicorp/memberlist"
)

// cryptoGuard is what the gossip guard needs to look inside encrypted
// frames: the keyring memberlist uses (so rotations are followed) and
// whether plaintext is refused anyway.
type cryptoGuard struct {
	keyring        *memberlist.Keyring
	verifyIncoming bool
	// undecryptable counts the packets no key of the ring opened (which
	// memberlist drops, or reads as plaintext without VerifyIncoming):
	// a member gossiping with a key this one lacks, as a key rotation done
	// out of order would make.
	undecryptable atomic.Uint64
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
func (g *cryptoGuard) decrypt(msg, aad []byte) ([]byte, error) {
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
func (g *cryptoGuard) checkPacket(buf []byte) error {
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
	case errors.Is(err, ErrFrame):
		return err
	case err == nil:
		return checkPacket(plain)
	}
	g.undecryptable.Add(1)
	switch {
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
func (g *cryptoGuard) checkEncryptedStream(br *bufio.Reader, label []byte) error {
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
		if errors.Is(err, ErrFrame) {
			return err
		}
		return refuse("encrypted stream message: %v", err)
	}
	if len(plain) == 0 {
		return refuse("empty encrypted stream message")
	}
	return checkStreamBody(plain[0], bufio.NewReader(bytes.NewReader(plain[1:])), nil, nil)
}
