package gossip

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"

	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/dirsync"
)

// Encryption encrypts the gossip traffic with memberlist's keyring
// (AES-GCM; Consul's model). Keys are 16, 24 or 32 bytes; the first is the
// primary, which encrypts; every key decrypts. VerifyIncoming refuses
// plaintext gossip, VerifyOutgoing sends encrypted gossip: a cluster moving
// to encryption turns on the keys with both off, then VerifyOutgoing on
// every node, then VerifyIncoming.
type Encryption struct {
	Keys                           [][]byte
	VerifyIncoming, VerifyOutgoing bool
}

// ParseKeys reads a key file: one base64 key a line (blank lines and
// lines starting with # are skipped), the primary first.
func ParseKeys(text string) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("gossip: key on line %d: not base64: %w", i+1, err)
		}
		if err := memberlist.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("gossip: key on line %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("gossip: the key file holds no key")
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

// SetKeys rotates the gossip keys to keys, the first the primary:
// new keys are installed, then the primary switched, then the keys left
// out removed, so that a rotation staged across the cluster (install
// everywhere, then use everywhere, then remove) never loses a member.
// It fails when gossip is not encrypted.
func (m *Membership) SetKeys(keys [][]byte) error {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.ring == nil {
		return errors.New("gossip: encryption is off: no keyring to rotate")
	}
	if err := setKeys(m.ring, keys); err != nil {
		return err
	}
	return m.persistKeys()
}

// Keyring lists the keyring (action topology.KeyringList) or changes it by
// one key (topology.KeyringInstall, topology.KeyringUse, topology.KeyringRemove), and returns the
// keys after it, the primary first. A change is kept in KeyringFile.
func (m *Membership) Keyring(action string, key []byte) ([][]byte, error) {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.ring == nil {
		return nil, errors.New("gossip: encryption is off: no keyring")
	}
	var err error
	switch action {
	case topology.KeyringList:
		return m.ring.GetKeys(), nil
	case topology.KeyringInstall:
		err = m.ring.AddKey(key)
	case topology.KeyringUse:
		err = m.ring.UseKey(key)
	case topology.KeyringRemove:
		err = m.ring.RemoveKey(key)
	default:
		err = fmt.Errorf("gossip: unknown keyring action %q", action)
	}
	if err != nil {
		return nil, fmt.Errorf("gossip: keyring %s: %w", action, err)
	}
	if err := m.persistKeys(); err != nil {
		return nil, err
	}
	return m.ring.GetKeys(), nil
}

// persistKeys writes the keyring to KeyringFile, if there is one.
func (m *Membership) persistKeys() error {
	if m.cfg.KeyringFile == "" {
		return nil
	}
	if err := writeKeyring(m.cfg.KeyringFile, m.ring.GetKeys()); err != nil {
		return fmt.Errorf("gossip: keeping the keyring: %w", err)
	}
	return nil
}

// setKeys replaces the keyring's keys with keys, the first the
// primary, without a moment where a key still in use is missing: new keys
// are installed, the primary switched, then the keys not in keys removed.
func setKeys(ring *memberlist.Keyring, keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("gossip: no key")
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
