package client

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/testwait"
)

// TestLocateByTheClientsMap: Locate computes digest, slot and shard as the
// grid does, names the shard's replicas (preferred leader first) and the
// leader, and follows what the client learned from a Redirect.
func TestLocateByTheClientsMap(t *testing.T) {
	fc := newFakeCluster(t, 3, 4)
	c := fc.dial(t, "")
	ctx := testCtx(t)
	for s := range 4 {
		key := fc.keyOn(s, 0)
		loc, err := c.Locate(ctx, "ns", key)
		d := digest.Record("ns", []byte(key), nil)
		if err != nil || loc.Shard != s || loc.Digest != d.String() || loc.Slot != d.Slot(fc.slots) || loc.Epoch != 1 {
			t.Fatalf("locate %s: %+v %v; want shard %d digest %s slot %d", key, loc, err, s, d, d.Slot(fc.slots))
		}
		l := s % 3
		if loc.Leader != (LocatedNode{ID: fakeNodeID(l), Addr: fc.addrs[l]}) || len(loc.Replicas) != 3 || loc.Replicas[0] != loc.Leader {
			t.Fatalf("locate %s: leader %+v replicas %+v; want n%d first", key, loc.Leader, loc.Replicas, l)
		}
	}
	// An entity places the key by the entity.
	key := fc.keyOn(0, 0)
	loc, err := c.Locate(ctx, "ns", key, ForEntity("order-9"))
	want := digest.Record("ns", []byte(key), []byte("order-9"))
	if err != nil || loc.Digest != want.String() || loc.Shard != fc.shardOf(ReserveOp("ns", key, WithEntity("order-9", 1)).pb) {
		t.Fatalf("locate with an entity: %+v %v, want digest %s", loc, err, want)
	}
	// A Redirect moves the leader the client knows, before the map does.
	fc.move(1, 2, false)
	if _, err := c.Reserve(ctx, "ns", fc.keyOn(1, 1)); err != nil {
		t.Fatal(err)
	}
	if loc, err := c.Locate(ctx, "ns", fc.keyOn(1, 0)); err != nil || loc.Leader.ID != fakeNodeID(2) {
		t.Fatalf("after a Redirect to n2: leader %+v %v", loc.Leader, err)
	}
	if _, err := c.Locate(ctx, "", "k"); err == nil {
		t.Fatal("locate without a namespace")
	}
}

// TestRedirectToAnAvoidedLeaderIsNotFollowed: the leader of shard 1 is
// gone and its followers still name it. The client, which found it
// unreachable, does not follow those Redirects: it asks the shard's
// replicas in turn until one leads. Nothing it sent may have been applied
// (the gone node refused the connection, the others redirected), so only
// the send that was answered counts.
func TestRedirectToAnAvoidedLeaderIsNotFollowed(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		fc := newFakeCluster(t, 3, 3)
		c := fc.dial(t, "", WithBatching(batching),
			WithRetryPolicy(RetryPolicy{Budget: 10 * time.Second, BaseBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}))
		testwait.For(t, 10*time.Second, "the map", func() bool { return c.r.mapEpoch() == 1 })
		fc.nodes[1].shutdown() // never reached by this client: its sends are refused
		var named atomic.Int32
		fc.setOverride(func(self, shard int) *gridpb.Redirect {
			if shard != 1 {
				return nil // every other shard is served where it is asked
			}
			if named.Add(1) > 6 {
				// The election is over: node 2 leads.
				if self == 2 {
					return nil
				}
				return &gridpb.Redirect{Shard: 1, LeaderId: fakeNodeID(2), LeaderAddr: fc.addrs[2], Epoch: 1}
			}
			return &gridpb.Redirect{Shard: 1, LeaderId: fakeNodeID(1), LeaderAddr: fc.addrs[1], Epoch: 1}
		})
		r, sends, err := c.one(testCtx(t), ReserveOp("ns", fc.keyOn(1, 0)))
		if err != nil || r.Outcome != OutcomeAcquired || sends != 1 {
			t.Fatalf("reserve: %v %v, %d sends counted; want ACQUIRED, only the answered send counted", r.Outcome, err, sends)
		}
		if got := receivedKeys(fc.nodes[2], "reserve"); len(got) != 1 {
			t.Fatalf("node 2 applied %v", got)
		}
	})
}
