package cluster

import (
	"testing"

	"github.com/l4xg/grid/cluster/topology"
)

// A shard's leadership goes back to its preferred leader only when that
// replica could take it at once: a leader is there to hand it over, the
// replica's clock is within the bound, its disk has room, and it has applied the leader's
// commit to within a ready replica's lag. A replica restarted with a long
// log tail still to apply (applied far behind) keeps waiting.
func TestHandBackWaitsForACaughtUpReplica(t *testing.T) {
	lead := topology.ReplicaStatus{RaftState: "Leader", Applied: 100_000, Commit: 100_000, Last: 100_001}
	follower := func(applied uint64, clockOK bool) topology.ReplicaStatus {
		return topology.ReplicaStatus{RaftState: "Follower", Leader: "n2", Applied: applied, Commit: 100_000, Last: 100_000, ClockOK: clockOK}
	}
	for _, c := range []struct {
		name       string
		pref, lead topology.ReplicaStatus
		want       bool
	}{
		{"caught up", follower(100_000, true), lead, true},
		{"within the ready lag", follower(100_000-maxReadyLag, true), lead, true},
		{"log there, still applying it", follower(20_000, true), lead, false},
		{"just past the ready lag", follower(100_000-maxReadyLag-1, true), lead, false},
		{"clock outside the bound", follower(100_000, false), lead, false},
		{"disk below its reserve", func() topology.ReplicaStatus { f := follower(100_000, true); f.DiskFull = true; return f }(), lead, false},
		{"the leader it names no longer leads", follower(100_000, true), topology.ReplicaStatus{RaftState: "Follower", Commit: 100_000}, false},
	} {
		if got := handBack(c.pref, c.lead); got != c.want {
			t.Errorf("%s: handBack = %v, want %v", c.name, got, c.want)
		}
	}
}
