package main

import (
	"testing"
	"time"
)

// TestUnavailabilityOfARestart: a full restart's unavailability counts from
// the nodes' start, not from the crash, and is held to the restart bar;
// any other fault's counts from the operation's start against the failover
// bar.
func TestUnavailabilityOfARestart(t *testing.T) {
	s := time.Second
	o := &outcome{
		cfg: config{Workload: "app"},
		samples: []sample{
			// Worker 0: sent as the cluster crashed, failed, served again
			// 3 s after the restart at 14 s.
			{Start: 10 * s, End: 11 * s, Worker: 0, Err: "unavailable"},
			{Start: 11 * s, End: 17 * s, Worker: 0},
			// Worker 1: blocked 2.5 s by the kill at 30 s.
			{Start: 30 * s, End: 32*s + s/2, Worker: 1},
		},
		faults: []made{
			{planned: planned{Kind: faultRestart, Hold: 3 * s}, Start: 10 * s, End: 15 * s, Settled: 3 * s, Restarted: 14 * s},
			{planned: planned{Kind: faultKill, Hold: 2 * s}, Start: 30 * s, End: 32 * s, Settled: s},
		},
	}
	r := unavailability(o)
	if got := o.faults[0].Unavailable; got != 3*s {
		t.Errorf("the restart's unavailability %v, want 3s (from the restart at 14s to the success at 17s)", got)
	}
	if got := o.faults[1].Unavailable; got != 2*s+s/2 {
		t.Errorf("the kill's unavailability %v, want 2.5s", got)
	}
	if r.Pass {
		t.Errorf("a kill that blocked a consumer 2.5 s passed the 2 s bar: %s", r.Detail)
	}
	o.samples[2].End = 31 * s
	if r := unavailability(o); !r.Pass {
		t.Errorf("a restart served 3 s after the nodes' start and a kill of 1 s failed: %s", r.Detail)
	}
	o.samples[1].End = 25 * s
	if r := unavailability(o); r.Pass {
		t.Errorf("a restart served 11 s after the nodes' start passed the 10 s bar: %s", r.Detail)
	}
}

// TestUnavailabilityEndsAtTheNextFault: a block that runs into the next
// fault counts for the first only until the next one starts.
func TestUnavailabilityEndsAtTheNextFault(t *testing.T) {
	s := time.Second
	o := &outcome{
		cfg: config{Workload: "app"},
		samples: []sample{
			// Sent as the first restart settled, then caught by the second,
			// which began at 6 s: answered at 12 s, 2 s after the second's
			// nodes started.
			{Start: 5*s + s/2, End: 12 * s, Worker: 0},
		},
		faults: []made{
			{planned: planned{Kind: faultRestart}, Start: 1 * s, End: 5 * s, Settled: s, Restarted: 4 * s},
			{planned: planned{Kind: faultRestart}, Start: 6 * s, End: 11 * s, Settled: s, Restarted: 10 * s},
		},
	}
	unavailability(o)
	if got := o.faults[0].Unavailable; got != s/2 {
		t.Errorf("the first restart's unavailability %v, want 500ms (from the call at 5.5s to the next fault at 6s), not 6.5s", got)
	}
}
