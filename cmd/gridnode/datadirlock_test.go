package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
)

// A second gridnode started on a data directory that a running one holds
// stops before it reads or writes anything there, saying which process
// holds it; the first serves on.
func TestSecondNodeOnADataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	first := startServe(t, dir)
	var log syncBuffer
	second := launchProc(t, &log, "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "", "--log-level", "warn")
	select {
	case <-second.Exited():
	case <-time.After(60 * time.Second):
		t.Fatal("the second node on the data directory did not stop")
	}
	if second.Err() == nil {
		t.Fatal("the second node on the data directory exited with status 0")
	}
	if out := log.String(); !strings.Contains(out, "directory in use") || !strings.Contains(out, fmt.Sprintf("pid %d", first.PID())) {
		t.Fatalf("the second node said %q; want the data directory in use by pid %d", out, first.PID())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, first.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Reserve(ctx, "lock", "k1")
	if err != nil || r.Outcome != client.OutcomeAcquired {
		t.Fatalf("the first node after the refused start: %+v, %v", r, err)
	}
}
