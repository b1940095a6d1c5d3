package raftlog

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

func TestOptionsValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("zero Options: %v", err)
	}
	bad := Options{CacheSize: -1}
	if err := bad.Validate(); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("negative CacheSize: %v, want ErrInvalidOptions", err)
	}
	if _, err := Open(t.TempDir(), bad); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Open with bad options: %v, want ErrInvalidOptions", err)
	}
}

func TestOpenRejectsIncompatibleLayout(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(metaLayoutKey, []byte{layoutVersion + 1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{Logger: quietLogger{}}); !errors.Is(err, ErrIncompatibleLayout) {
		t.Fatalf("Open of a layout-%d store: %v, want ErrIncompatibleLayout", layoutVersion+1, err)
	}
	// The failed Open released the database (and its lock).
	db, err = pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatalf("reopen after failed Open: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRecordsLayout(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{NoSync: true, CacheSize: 1 << 20})
	db, err := s.db.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer s.db.Release()
	v, closer, err := db.Get(metaLayoutKey)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if len(v) != 1 || v[0] != layoutVersion {
		t.Fatalf("layout key = %x, want %d", v, layoutVersion)
	}
}
