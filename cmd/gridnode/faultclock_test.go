package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/internal/testwait"
)

// TestServeRefusesFaultClockWithoutOptIn: the fault-injection flag is
// refused unless fault injection is enabled explicitly, naming both flags.
func TestServeRefusesFaultClockWithoutOptIn(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := serve([]string{"--fault-clock-file", filepath.Join(t.TempDir(), "offset"), "--data-dir", t.TempDir()}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "--fault-clock-file") || !strings.Contains(stderr.String(), "--enable-fault-injection") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// TestFaultClockFollowsItsFile: no file is no offset; the offset written
// is taken up while the clock runs; a bad value at start is an error, and
// later is ignored (the last good offset stays).
func TestFaultClockFollowsItsFile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "offset")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := newFaultClock(ctx, path, log)
	if err != nil {
		t.Fatal(err)
	}
	near := func(want time.Duration) bool {
		d := time.Until(c.Now()) - want
		return d > -time.Second && d < time.Second
	}
	if !near(0) {
		t.Fatalf("no file: offset %v", time.Until(c.Now()))
	}
	for _, off := range []time.Duration{time.Hour, -90 * time.Second} {
		if err := os.WriteFile(path, []byte(off.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 10*time.Second, "the clock to take offset "+off.String(), func() bool { return near(off) })
	}
	if err := os.WriteFile(path, []byte("soon"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newFaultClock(ctx, path, log); err == nil || !strings.Contains(err.Error(), "fault clock file") {
		t.Fatalf("a bad offset at start: %v", err)
	}
	if !near(-90 * time.Second) {
		t.Fatalf("a bad offset later moved the clock: offset %v", time.Until(c.Now()))
	}
}
