package pebbleguard

import (
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

var errTestClosed = errors.New("test: closed")

func open(t *testing.T) *DB {
	t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	return New(db, errTestClosed)
}

// Close waits for a hold in progress; afterwards Acquire and With answer
// the owner's closed error, and a second Close nil.
func TestCloseWaitsThenRefuses(t *testing.T) {
	g := open(t)
	db, err := g.Acquire()
	if err != nil || db == nil {
		t.Fatalf("acquire an open database: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a hold was in progress", err)
	case <-time.After(50 * time.Millisecond): // 50 ms for a Close that does not wait to return
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatalf("write under the hold: %v", err)
	}
	g.Release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := g.Acquire(); !errors.Is(err, errTestClosed) {
		t.Fatalf("acquire after close: %v, want the closed error", err)
	}
	ran := false
	if err := g.With(func(*pebble.DB) error { ran = true; return nil }); !errors.Is(err, errTestClosed) || ran {
		t.Fatalf("With after close: %v (ran %v)", err, ran)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestWithHoldsAndPassesTheError(t *testing.T) {
	g := open(t)
	defer g.Close()
	boom := errors.New("boom")
	if err := g.With(func(db *pebble.DB) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("With: %v, want fn's error", err)
	}
}
