package shard

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDirSize: l4xg_grid_data_dir_size_bytes is what the data directory's
// files take, subdirectories included, not the file system's size.
func TestDirSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "raft", "snapshots"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"hard-settings.json": 100, "raft/seg-1": 4096, "raft/snapshots/s": 12345} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := dirSize(dir); err != nil || n != 100+4096+12345 {
		t.Fatalf("dirSize = %d, %v; want %d", n, err, 100+4096+12345)
	}
}
