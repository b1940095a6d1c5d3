package client_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/gridtest"
)

// TestSettlesWithoutTheEntityOnARealCluster: on a real 3-node cluster (4
// shards), through a routing client with default options, keys reserved
// WithEntity are completed, failed, released and extended without
// ForEntity: each settle takes effect on the entity's shard, and the
// completed versions are committed (a lower one is STALE).
func TestSettlesWithoutTheEntityOnARealCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{})
	cl, err := client.Dial(testCtx(t), strings.Join(c.Addrs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testCtx(t)
	m := c.Map()
	moved := 0
	for i := range 16 {
		key, entity := fmt.Sprintf("evt-%d", i), fmt.Sprintf("order-%d", i)
		placed := digest.Record("ns", []byte(key), []byte(entity))
		if m.ShardOf(placed) != c.ShardOf("ns", key) {
			moved++
		}
		r, err := cl.Reserve(ctx, "ns", key, client.WithEntity(entity, 7))
		if err != nil || r.Outcome != client.OutcomeAcquired {
			t.Fatalf("reserve %s: %v %v", key, r.Outcome, err)
		}
		var want client.State
		switch i % 4 {
		case 0:
			r, err = cl.Complete(ctx, "ns", key, r.Token)
			want = client.StateCompleted
		case 1:
			r, err = cl.Fail(ctx, "ns", key, r.Token)
			want = client.StateFailed
		case 2:
			r, err = cl.Release(ctx, "ns", key, r.Token)
			want = client.StateAbsent
		default:
			r, err = cl.Extend(ctx, "ns", key, r.Token, time.Minute)
			want = client.StateProcessing
		}
		if err != nil || r.Outcome != client.OutcomeOK || r.State != want {
			t.Fatalf("settle %d of %s without the entity: %v %v %v, want OK %v", i%4, key, r.Outcome, r.State, err, want)
		}
		if got, err := cl.Get(ctx, "ns", key, client.ForEntity(entity)); err != nil || got.State != want {
			t.Fatalf("get %s with its entity: %v %v, want %v", key, got.State, err, want)
		}
		if i%4 == 0 {
			stale, err := cl.Reserve(ctx, "ns", key+"-late", client.WithEntity(entity, 6))
			if err != nil || stale.Outcome != client.OutcomeStale {
				t.Errorf("version 6 of %s after version 7 completed: %v %v, want STALE", entity, stale.Outcome, err)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no entity moved its key to another shard: the test proves nothing")
	}
}

// TestLocateOnAStandaloneNode: a standalone node holds every shard, and
// Locate still says which of them serves a key (the one the node routes
// it to), through a routing client and one built WithoutRouting.
func TestLocateOnAStandaloneNode(t *testing.T) {
	n := gridtest.Start(t, gridtest.Options{Shards: 8})
	for _, opts := range [][]client.Option{nil, {client.WithoutRouting()}} {
		cl, err := client.Dial(testCtx(t), n.Addr(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		m, err := cl.ClusterMap(testCtx(t))
		if err != nil || !m.Standalone || m.ShardCount < 2 {
			t.Fatalf("cluster map: %+v %v", m, err)
		}
		seen := map[int]bool{}
		for i := range 32 {
			key := fmt.Sprintf("k%d", i)
			d := digest.Record("ns", []byte(key), nil)
			slot := d.Slot(uint32(m.Slots))
			want := int(uint64(slot) * uint64(m.ShardCount) / uint64(m.Slots))
			loc, err := cl.Locate(testCtx(t), "ns", key)
			if err != nil || !loc.Standalone || loc.Slot != slot || loc.Shard != want || loc.Digest != d.String() {
				t.Fatalf("locate %s (options %d): %+v %v; want slot %d shard %d", key, len(opts), loc, err, slot, want)
			}
			seen[want] = true
		}
		if len(seen) < 2 {
			t.Fatalf("32 keys on shards %v only", seen)
		}
	}
}
