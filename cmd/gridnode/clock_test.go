package main

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/internal/gridtest"
)

// TestCLIStatusShowsTheClock: status shows the bound, and, once the
// node's clock is set back an hour behind a shard's stamps, which shard
// grants no lease; --json carries the clock fields. A reserve there exits
// 2 (the grid is unavailable for it) with the rule in its message.
func TestCLIStatusShowsTheClock(t *testing.T) {
	var ms atomic.Int64
	ms.Store(time.Now().UnixMilli())
	n := gridtest.Start(t, gridtest.Options{Clock: func() time.Time { return time.UnixMilli(ms.Load()) }})
	code, stdout, stderr := cli(t, "status", "--addr", n.Addr())
	if code != 0 || !strings.Contains(stdout, "clock ok, max clock offset 250ms") {
		t.Fatalf("status: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := cli(t, "reserve", "--addr", n.Addr(), "--ns", "cli", "--key", "k"); code != 0 {
		t.Fatalf("reserve: exit %d: %s", code, stderr)
	}
	ms.Add(-time.Hour.Milliseconds())
	code, stdout, stderr = cli(t, "status", "--addr", n.Addr())
	if code != 0 || !strings.Contains(stdout, "clock ok, max clock offset 250ms") ||
		!strings.Contains(stdout, "stamps 1h0m0s ahead of this node's clock, beyond the max clock offset: it grants no lease") {
		t.Fatalf("status of a node an hour behind: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, "status", "--addr", n.Addr(), "--json")
	if m := oneJSON(t, stdout); code != 0 || m["clock_ok"] != true || m["max_clock_offset_ms"] != float64(250) {
		t.Fatalf("status --json: exit %d %v", code, m)
	}
	code, _, stderr = cli(t, "reserve", "--addr", n.Addr(), "--ns", "cli", "--key", "k", "--timeout", "1s")
	if code != exitUnreachable || !strings.Contains(stderr, "behind the shard's latest stamp") {
		t.Fatalf("reserve on a node an hour behind: exit %d: %s", code, stderr)
	}
}

// TestServeMaxClockOffsetFlag: a bound outside 1ms..1h is refused before
// anything starts, naming the range.
func TestServeMaxClockOffsetFlag(t *testing.T) {
	for _, v := range []string{"0s", "2h", "-1s"} {
		var stdout, stderr bytes.Buffer
		if code := serve([]string{"--max-clock-offset", v, "--data-dir", t.TempDir()}, &stdout, &stderr); code != 1 ||
			!strings.Contains(stderr.String(), "--max-clock-offset") || !strings.Contains(stderr.String(), "out of range 1ms..1h0m0s") {
			t.Errorf("serve --max-clock-offset %s: exit %d: %s", v, code, stderr.String())
		}
	}
}

// TestServeInflightEntriesFlag: entries in flight outside 0..16 are
// refused before anything starts, naming the flag and the range.
func TestServeInflightEntriesFlag(t *testing.T) {
	for _, v := range []string{"-1", "17"} {
		var stdout, stderr bytes.Buffer
		if code := serve([]string{"--inflight-entries", v, "--data-dir", t.TempDir()}, &stdout, &stderr); code != 1 ||
			!strings.Contains(stderr.String(), "--inflight-entries") || !strings.Contains(stderr.String(), "out of range 1..16") {
			t.Errorf("serve --inflight-entries %s: exit %d: %s", v, code, stderr.String())
		}
	}
}
