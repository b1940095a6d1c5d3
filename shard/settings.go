package shard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/l4xg/grid/internal/dirsync"
)

// HardSettings corrupt data if changed after a data directory was created:
// the digest function, the slot count and the shard count decide where every
// record lives. They are written at creation and checked at every start.
type HardSettings struct {
	Format int    `json:"format"`
	Digest string `json:"digest"`
	Slots  uint32 `json:"slots"`
	Shards int    `json:"shards"`
}

const (
	settingsFile  = "hard-settings.json"
	formatVersion = 1
	digestName    = "farm-fingerprint128(namespace|0x00|key), hi bits 32-47 = farm32(namespace)"
	// DefaultSlots is the fixed number of slots the digest space is cut into.
	DefaultSlots = 4096
	// DefaultShards is the shard count of a new standalone grid: one Raft
	// group, so that group commit fills its entries. A standalone node
	// never joins a cluster, and one group's apply loop is far from a
	// core's worth of work (DefaultShards measured against 2, 4 and 8 in
	// bench/README.md); --shards sets more where it pays.
	DefaultShards = 1
)

// loadOrCreateSettings returns the settings stored in dir, creating them from
// want when the directory is new, and refuses a mismatch with want.
func loadOrCreateSettings(dir string, want HardSettings) (HardSettings, error) {
	want.Format, want.Digest = formatVersion, digestName
	path := filepath.Join(dir, settingsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		b, err = json.MarshalIndent(want, "", "  ")
		if err != nil {
			return want, err
		}
		if err := dirsync.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return want, fmt.Errorf("shard: write hard settings: %w", err)
		}
		return want, nil
	}
	if err != nil {
		return want, fmt.Errorf("shard: read hard settings: %w", err)
	}
	var got HardSettings
	if err := json.Unmarshal(b, &got); err != nil {
		return want, fmt.Errorf("%w: %s: %w", ErrHardSettings, path, err)
	}
	if got != want {
		return got, fmt.Errorf("%w: %s has %+v, this start asks for %+v (slot count, shard count and digest are fixed at creation)",
			ErrHardSettings, path, got, want)
	}
	return got, nil
}

// readSettings returns the hard settings stored in dir.
func readSettings(dir string) (HardSettings, error) {
	var got HardSettings
	b, err := os.ReadFile(filepath.Join(dir, settingsFile))
	if err != nil {
		return got, err
	}
	if err := json.Unmarshal(b, &got); err != nil {
		return got, fmt.Errorf("%w: %w", ErrHardSettings, err)
	}
	return got, nil
}

// StoredSettings returns the hard settings a data directory holds; ok is
// false for a directory that holds none yet (new, or a cluster member's
// that has not adopted the cluster's shard count).
func StoredSettings(dir string) (s HardSettings, ok bool, err error) {
	s, err = readSettings(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return s, false, nil
	}
	return s, err == nil, err
}
