package shard

import (
	"context"
	"testing"
	"time"

	"github.com/l4xg/grid/internal/testwait"
)

// TestRetriedRemovalOfACutOffLeaderIsNotSuccess (defect 4): a leader cut
// off from its group appends the removal of a voter, which cannot commit:
// RemoveServer's outcome is unknown. Its latest configuration no longer
// lists the voter, but a retry must not report success while that
// configuration is uncommitted. The others, who never got the removal,
// elect a new leader; after the heal the voter is still in the group,
// consistent with no call having reported it removed, and the old leader
// drops its uncommitted removal. A removal on the new leader then succeeds
// and is committed.
func TestRetriedRemovalOfACutOffLeaderIsNotSuccess(t *testing.T) {
	// A long lease: the cut-off leader keeps leading through both calls.
	nh := tunedNetHosts(t, 3, false, func(c *HostConfig) { c.HeartbeatTimeout = 3 * time.Second })
	at, l := nh.leader(0)
	victim := (at + 1) % 3
	id := string(nh.peers[victim].ID)
	nh.faults[at].Isolate()

	removeWithin := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return l.RemoveServer(ctx, id)
	}
	if err := removeWithin(300 * time.Millisecond); !errorsIs(err, ErrOutcomeUnknown) {
		t.Fatalf("removal of %s on the cut-off leader: %v, want ErrOutcomeUnknown", id, err)
	}
	if servers, _ := l.Configuration(); len(servers) != 2 {
		t.Fatalf("the cut-off leader's latest configuration %v, want the removal in it", servers)
	}
	retry := removeWithin(300 * time.Millisecond)
	if retry == nil {
		t.Fatalf("retried removal of %s on the cut-off leader reported success while it cannot be committed", id)
	}
	if !errorsIs(retry, ErrOutcomeUnknown) && !errorsIs(retry, ErrNotLeader) {
		t.Fatalf("retried removal: %v, want ErrOutcomeUnknown (or ErrNotLeader once it stepped down)", retry)
	}
	// The others, who never got the removal, elect a leader of their own
	// while the old one steps down; then the network heals.
	var nl *Replica
	testwait.For(t, 20*time.Second, "a new leader of shard 0 beside the cut-off one", func() bool {
		for i := range nh.hosts {
			if r := nh.replica(i, 0); i != at && r.IsLeader() {
				nl = r
			}
		}
		return nl != nil && !l.IsLeader()
	})
	nh.faults[at].Heal()
	testwait.For(t, 20*time.Second, "the old leader to follow the new one", func() bool {
		lead, _ := l.Leader()
		return lead == nl.cfg.NodeID && l.Status().CommitIndex >= nl.CommitIndex()
	})
	if _, ok := findServer(nl.Status().Group, id); !ok {
		t.Fatalf("%s is out of the group after the heal although no removal reported success: %v", id, nl.Status().Group)
	}
	testwait.For(t, 20*time.Second, "the old leader to drop its uncommitted removal", func() bool {
		_, ok := findServer(l.Status().Group, id)
		return ok
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if nl.cfg.NodeID == id {
		// The voter to remove leads: hand over first.
		if err := nl.TransferLeadership(ctx, "", ""); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 20*time.Second, "a leader other than "+id, func() bool {
			for i := range nh.hosts {
				if r := nh.replica(i, 0); i != victim && r.IsLeader() {
					nl = r
					return true
				}
			}
			return false
		})
	}
	if err := nl.RemoveServer(ctx, id); err != nil {
		t.Fatalf("removal of %s on the new leader: %v", id, err)
	}
	if v := nl.Status().GroupView; len(v.Group) != 2 || !v.ConfigCommitted {
		t.Fatalf("new leader's group after the removal: %+v, want 2 voters, committed", v)
	}
	if err := nl.RemoveServer(ctx, id); err != nil {
		t.Fatalf("removal of %s again (committed, no longer a member): %v", id, err)
	}
	// Adding a voter that is one already makes no new configuration.
	v := nl.Status().GroupView
	for _, srv := range v.Group {
		if err := nl.AddVoter(ctx, string(srv.ID), string(srv.Address)); err != nil {
			t.Fatalf("add voter %s, a voter already: %v", srv.ID, err)
		}
		if err := nl.AddNonvoter(ctx, string(srv.ID), string(srv.Address)); err != nil {
			t.Fatalf("add non-voter %s, a voter already: %v", srv.ID, err)
		}
	}
	if after := nl.Status().GroupView; after.ConfigIndex != v.ConfigIndex || !sameServers(after.Group, v.Group) {
		t.Fatalf("group after re-adding its voters: %+v, want %+v", after, v)
	}
}
