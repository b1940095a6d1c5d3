package dirsync

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
)

func TestSync(t *testing.T) {
	dir := t.TempDir()
	if err := Sync(dir); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	if err := Sync(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Sync of a missing directory: %v, want ErrNotExist", err)
	}
	if err := Existing(dir, missing); err != nil {
		t.Fatalf("Existing skips what is missing: %v", err)
	}
}
