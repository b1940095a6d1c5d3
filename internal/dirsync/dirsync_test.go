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

func TestMkdirAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "c")
	if err := MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("MkdirAll of an existing directory: %v", err)
	}
	if err := Sync(dir); err != nil {
		t.Fatal(err)
	}
}
