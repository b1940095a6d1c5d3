package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/testwait"
)

// TestGroupViewFollowsMembership: Status reports the group as each replica
// knows it. A replica not added yet is no member and has never heard from a
// leader; once added as a non-voter it sees itself as one, then as a voter
// after its promotion; the leader reports each configuration committed at a
// growing index and a last contact of 0. After a snapshot and a restart the
// leader's configuration, whose entries now live only in the snapshot, is
// still reported committed at the same index.
func TestGroupViewFollowsMembership(t *testing.T) {
	nh := openEmptyHosts(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r0, err := nh.hosts[0].StartReplica(0, true)
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "host 0 to lead", r0.IsLeader)
	st := r0.Status()
	if st.Suffrage != SuffrageVoter || !st.ConfigCommitted || st.ConfigIndex == 0 || st.LastContact != 0 || len(st.Group) != 1 {
		t.Fatalf("leader alone: %+v", st.GroupView)
	}
	alone := st.ConfigIndex

	r1, err := nh.hosts[1].StartReplica(0, false)
	if err != nil {
		t.Fatal(err)
	}
	if v := r1.Status().GroupView; v.Suffrage != SuffrageNone || len(v.Group) != 0 || v.LastContact >= 0 || v.ConfigCommitted {
		t.Fatalf("replica not added yet: %+v", v)
	}
	id1 := string(nh.peers[1].ID)
	if err := r0.AddNonvoter(ctx, id1, nh.addrs[1]); err != nil {
		t.Fatal(err)
	}
	v := r0.Status().GroupView
	if !v.ConfigCommitted || v.ConfigIndex <= alone || len(v.Group) != 2 || v.Group[1].ID != "n1" || v.Group[1].Suffrage != raft.Nonvoter {
		t.Fatalf("leader after adding n1 as a non-voter: %+v (alone at %d)", v, alone)
	}
	testwait.For(t, 20*time.Second, "n1 to see itself a non-voter", func() bool {
		v := r1.Status().GroupView
		return v.Suffrage == SuffrageNonvoter && v.ConfigCommitted && v.LastContact >= 0
	})
	if err := r0.AddVoter(ctx, id1, nh.addrs[1]); err != nil {
		t.Fatal(err)
	}
	promoted := r0.Status().GroupView
	if !promoted.ConfigCommitted || promoted.ConfigIndex <= v.ConfigIndex || promoted.Suffrage != SuffrageVoter {
		t.Fatalf("leader after promoting n1: %+v", promoted)
	}
	testwait.For(t, 20*time.Second, "n1 to see itself a voter at the leader's configuration", func() bool {
		v := r1.Status().GroupView
		return v.Suffrage == SuffrageVoter && v.ConfigCommitted && v.ConfigIndex == promoted.ConfigIndex
	})

	// The configuration entries end up in snapshots only, further back
	// than a scan of the log reaches.
	for i := range configScanLimit + 10 {
		propose(t, r0, reserve(fmt.Sprint("after-promotion-", i), time.Hour))
	}
	for _, r := range []*Replica{r0, r1} {
		if err := r.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	nh.stop(0)
	nh.stop(1)
	for i := range 2 {
		nh.restart(i)
		if _, err := nh.hosts[i].StartReplica(0, false); err != nil {
			t.Fatal(err)
		}
	}
	var l *Replica
	testwait.For(t, 20*time.Second, "a leader after the restart", func() bool {
		for i := range nh.hosts {
			if r := nh.replica(i, 0); r != nil && r.IsLeader() {
				l = r
				return true
			}
		}
		return false
	})
	if v := l.Status().GroupView; !v.ConfigCommitted || v.ConfigIndex != promoted.ConfigIndex || len(v.Group) != 2 {
		t.Fatalf("leader after a restart from snapshots: %+v, want committed at %d", v, promoted.ConfigIndex)
	}
}
