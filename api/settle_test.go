package api_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/keyspace"
)

// placed is a key reserved with an entity whose shard is not the key's own.
type placed struct {
	key, entity []byte
	own, shard  int // the key's shard without the entity; the entity's
}

// placedKeys returns n keys with prefix, each with an entity that places it
// on another shard than its own, in a grid of slots slots and shards shards.
func placedKeys(t testing.TB, prefix string, n int, slots uint32, shards int) []placed {
	t.Helper()
	shardOf := func(d digest.Digest) int { return int(uint64(d.Slot(slots)) * uint64(shards) / uint64(slots)) }
	var out []placed
	for j := 0; len(out) < n && j < 10000; j++ {
		key, entity := []byte(fmt.Sprintf("%s-%d", prefix, j)), []byte(fmt.Sprintf("order-%s-%d", prefix, j))
		p := placed{key: key, entity: entity, own: shardOf(digest.Record("ns", key, nil)), shard: shardOf(digest.Record("ns", key, entity))}
		if p.own != p.shard {
			out = append(out, p)
		}
	}
	if len(out) < n {
		t.Fatalf("found %d keys placed off their shard, want %d", len(out), n)
	}
	return out
}

// settleOp is a settle of p by token, without its entity unless entity is
// set.
func settleOp(op keyspace.Op, key, entity []byte, token uint64) *gridpb.Op {
	ns := []byte("ns")
	switch op {
	case keyspace.OpComplete:
		return &gridpb.Op{Op: &gridpb.Op_Complete{Complete: &gridpb.CompleteRequest{Namespace: ns, Key: key, Entity: entity, Token: token, Result: []byte("done")}}}
	case keyspace.OpFail:
		return &gridpb.Op{Op: &gridpb.Op_Fail{Fail: &gridpb.FailRequest{Namespace: ns, Key: key, Entity: entity, Token: token}}}
	case keyspace.OpRelease:
		return &gridpb.Op{Op: &gridpb.Op_Release{Release: &gridpb.ReleaseRequest{Namespace: ns, Key: key, Entity: entity, Token: token}}}
	}
	return &gridpb.Op{Op: &gridpb.Op_Extend{Extend: &gridpb.ExtendRequest{Namespace: ns, Key: key, Entity: entity, Token: token, LeaseMs: 120000}}}
}

// unarySettle sends op as its own RPC.
func unarySettle(c gridpb.GridClient, t *testing.T, op *gridpb.Op) (*gridpb.OpResult, error) {
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Complete:
		return c.Complete(gridtest.Context(t), o.Complete)
	case *gridpb.Op_Fail:
		return c.Fail(gridtest.Context(t), o.Fail)
	case *gridpb.Op_Release:
		return c.Release(gridtest.Context(t), o.Release)
	case *gridpb.Op_Extend:
		return c.Extend(gridtest.Context(t), o.Extend)
	}
	t.Fatalf("not a settle: %v", op)
	return nil, nil
}

// viaBatch sends op alone in a Batch.
func viaBatch(c gridpb.GridClient, t *testing.T, op *gridpb.Op) (*gridpb.OpResult, error) {
	resp, err := c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{op}})
	if err != nil {
		return nil, err
	}
	if e := resp.Results[0].Error; e != nil {
		return nil, status.Error(codes.Code(e.Code), e.Message)
	}
	return resp.Results[0], nil
}

func reserveWith(key, entity []byte, version uint64) *gridpb.ReserveRequest {
	return &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: key, Entity: entity, Version: version, LeaseMs: 60000}
}

// TestSettleFindsItsKeyWithoutTheEntity, on a standalone node of 8
// shards: a key reserved with an entity lives on the entity's shard, and
// Complete, Fail, Release and Extend by its token alone (unary and in a
// Batch) reach it and take effect; a Complete so commits the entity's
// version, and a lower version is STALE afterwards. A lost token answers
// LEASE_LOST, not the OK of a key nobody holds; the token decides over an
// entity the settle names.
func TestSettleFindsItsKeyWithoutTheEntity(t *testing.T) {
	n := gridtest.Start(t, gridtest.Options{Shards: 8}) // keys on several shards
	c := gridtest.Dial(t, n.Addr())
	m, err := c.ClusterMap(gridtest.Context(t), &gridpb.ClusterMapRequest{})
	if err != nil || m.ShardCount < 2 {
		t.Fatalf("cluster map: %v %v", m, err)
	}
	keys := placedKeys(t, "solo", 12, m.Slots, int(m.ShardCount))
	want := map[keyspace.Op]gridpb.State{
		keyspace.OpComplete: gridpb.State_COMPLETED, keyspace.OpFail: gridpb.State_FAILED,
		keyspace.OpRelease: gridpb.State_ABSENT, keyspace.OpExtend: gridpb.State_PROCESSING,
	}
	i := 0
	for _, send := range []struct {
		name string
		fn   func(gridpb.GridClient, *testing.T, *gridpb.Op) (*gridpb.OpResult, error)
	}{{"unary", unarySettle}, {"batch", viaBatch}} {
		for _, op := range []keyspace.Op{keyspace.OpComplete, keyspace.OpFail, keyspace.OpRelease, keyspace.OpExtend} {
			p := keys[i]
			i++
			res, err := c.Reserve(gridtest.Context(t), reserveWith(p.key, p.entity, 5))
			if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
				t.Fatalf("reserve %s: %v %v", p.key, res, err)
			}
			if s, ok := digest.TokenShard(res.Token, int(m.ShardCount)); !ok || s != p.shard {
				t.Fatalf("token %d names shard %d, the key lives on shard %d", res.Token, s, p.shard)
			}
			lost, err := send.fn(c, t, settleOp(op, p.key, nil, res.Token+uint64(m.ShardCount)))
			if err != nil || lost.Outcome != gridpb.Outcome_LEASE_LOST || lost.State != gridpb.State_PROCESSING {
				t.Errorf("%s %v with a lost token, without the entity: %v %v; want LEASE_LOST of the PROCESSING record", send.name, op, lost, err)
			}
			got, err := send.fn(c, t, settleOp(op, p.key, nil, res.Token))
			if err != nil || got.Outcome != gridpb.Outcome_OK || got.State != want[op] {
				t.Fatalf("%s %v by token without the entity: %v %v; want OK %v", send.name, op, got, err, want[op])
			}
			rec, err := c.Get(gridtest.Context(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: p.key, Entity: p.entity})
			if err != nil || rec.State != want[op] {
				t.Fatalf("%s %v: the record is %v %v, want %v", send.name, op, rec, err, want[op])
			}
			if op == keyspace.OpExtend && rec.DeadlineUnixMs < res.DeadlineUnixMs+50000 {
				t.Errorf("extend without the entity: deadline %d, reserve's %d", rec.DeadlineUnixMs, res.DeadlineUnixMs)
			}
			if op != keyspace.OpComplete {
				continue
			}
			// The entity's version 5 is committed: version 4 of another
			// key of it is stale.
			other := append([]byte("late-"), p.key...)
			if r, err := c.Reserve(gridtest.Context(t), reserveWith(other, p.entity, 4)); err != nil || r.Outcome != gridpb.Outcome_STALE {
				t.Errorf("%s: reserve of version 4 after version 5 completed: %v %v, want STALE", send.name, r, err)
			}
		}
	}

	// The token decides: a settle naming another entity than the key's
	// still settles the lease its token names.
	p := keys[i]
	res, err := c.Reserve(gridtest.Context(t), reserveWith(p.key, p.entity, 1))
	if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("reserve: %v %v", res, err)
	}
	got, err := c.Extend(gridtest.Context(t), &gridpb.ExtendRequest{Namespace: []byte("ns"), Key: p.key, Entity: []byte("another-entity"), Token: res.Token, LeaseMs: 60000})
	if err != nil || got.Outcome != gridpb.Outcome_OK {
		t.Errorf("extend naming another entity: %v %v, want OK", got, err)
	}
}

// TestSettleWithAForeignToken: a token never granted to the key (another
// key's, so naming another shard than the key's) finds no record there;
// the settle then asks the key's own shard, and the answer is that of the
// key's record, as it always was: LEASE_LOST of the PROCESSING record, a
// Release included (not the OK of a key nobody holds), and OK for a
// Release of a key nobody holds.
func TestSettleWithAForeignToken(t *testing.T) {
	n := gridtest.Start(t, gridtest.Options{Shards: 8}) // keys on several shards
	c := gridtest.Dial(t, n.Addr())
	m, err := c.ClusterMap(gridtest.Context(t), &gridpb.ClusterMapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	shards := int(m.ShardCount)
	shardOf := func(key []byte) int {
		return int(uint64(digest.Key("ns", key).Slot(m.Slots)) * uint64(shards) / uint64(m.Slots))
	}
	var held, other, absent []byte
	for j := 0; absent == nil; j++ {
		k := []byte(fmt.Sprintf("foreign-%d", j))
		switch {
		case held == nil:
			held = k
		case other == nil && shardOf(k) != shardOf(held):
			other = k
		case other != nil && shardOf(k) != shardOf(other):
			absent = k
		}
	}
	mine, err := c.Reserve(gridtest.Context(t), reserveWith(held, nil, 0))
	if err != nil || mine.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("reserve: %v %v", mine, err)
	}
	theirs, err := c.Reserve(gridtest.Context(t), reserveWith(other, nil, 0))
	if err != nil || theirs.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("reserve: %v %v", theirs, err)
	}
	if s, _ := digest.TokenShard(theirs.Token, shards); s == shardOf(held) {
		t.Fatalf("the foreign token names the key's own shard")
	}
	for _, send := range []struct {
		name string
		fn   func(gridpb.GridClient, *testing.T, *gridpb.Op) (*gridpb.OpResult, error)
	}{{"unary", unarySettle}, {"batch", viaBatch}} {
		for _, op := range []keyspace.Op{keyspace.OpComplete, keyspace.OpFail, keyspace.OpRelease, keyspace.OpExtend} {
			got, err := send.fn(c, t, settleOp(op, held, nil, theirs.Token))
			if err != nil || got.Outcome != gridpb.Outcome_LEASE_LOST || got.State != gridpb.State_PROCESSING {
				t.Errorf("%s %v of a held key with a foreign token: %v %v, want LEASE_LOST of the PROCESSING record", send.name, op, got, err)
			}
		}
		got, err := send.fn(c, t, settleOp(keyspace.OpRelease, absent, nil, theirs.Token))
		if err != nil || got.Outcome != gridpb.Outcome_OK || got.State != gridpb.State_ABSENT {
			t.Errorf("%s release of a key nobody holds with a foreign token: %v %v, want OK", send.name, got, err)
		}
	}
	// Both leases are untouched.
	for _, k := range [][]byte{held, other} {
		if got, err := c.Get(gridtest.Context(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: k}); err != nil || got.State != gridpb.State_PROCESSING {
			t.Errorf("%s after the foreign settles: %v %v", k, got, err)
		}
	}
}

// TestSettleByTokenInACluster: on three nodes replicating two shards, a
// settle without the entity of a key placed on the other shard goes where
// its token says: forwarded by a node that does not lead that shard, or
// refused with a Redirect to that shard's leader when the client routes.
func TestSettleByTokenInACluster(t *testing.T) {
	tc := startCluster(t, gridtest.ClusterOptions{})
	keys := placedKeys(t, "cl", 3, testSlots, testShards)
	for s := range testShards {
		tc.leader(s)
	}
	for k, p := range keys {
		l := tc.leader(p.shard)
		res, err := gridtest.Dial(t, l.addr).Reserve(gridtest.Context(t), reserveWith(p.key, p.entity, 3))
		if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
			t.Fatalf("reserve %s: %v %v", p.key, res, err)
		}
		// A smart client asking a node that does not lead the token's shard
		// is redirected there, not to the key's own shard.
		f := tc.follower(p.shard)
		_, err = gridtest.Dial(t, f.addr).Extend(redirectOnly(t), &gridpb.ExtendRequest{Namespace: []byte("ns"), Key: p.key, Token: res.Token, LeaseMs: 60000})
		if rd := redirectDetail(err); rd == nil || !tc.redirectsTo(rd, p.shard, l) {
			t.Errorf("key %d: extend with grid-redirect at a follower: %v (redirect %v), want a Redirect to shard %d at %s", k, err, rd, p.shard, l.id)
		}
		// A thin client asking any node is forwarded.
		for _, nd := range tc.nodes {
			got, err := gridtest.Dial(t, nd.addr).Extend(gridtest.Context(t), &gridpb.ExtendRequest{Namespace: []byte("ns"), Key: p.key, Token: res.Token, LeaseMs: 60000})
			if err != nil || got.Outcome != gridpb.Outcome_OK {
				t.Errorf("key %d: extend without the entity at %s: %v %v", k, nd.id, got, err)
			}
		}
		done, err := gridtest.Dial(t, f.addr).Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{settleOp(keyspace.OpComplete, p.key, nil, res.Token)}})
		if err != nil || done.Results[0].Outcome != gridpb.Outcome_OK || done.Results[0].State != gridpb.State_COMPLETED {
			t.Fatalf("key %d: complete without the entity in a batch at a follower: %v %v", k, done, err)
		}
		stale, err := gridtest.Dial(t, l.addr).Reserve(gridtest.Context(t), reserveWith(append([]byte("next-"), p.key...), p.entity, 2))
		if err != nil || stale.Outcome != gridpb.Outcome_STALE {
			t.Errorf("key %d: version 2 after version 3 completed: %v %v, want STALE", k, stale, err)
		}
	}

	// A foreign token (a lease of shard 1) on a key of shard 0, sent where
	// a routing client sends it (shard 1's leader, with grid-redirect) and
	// through every node: the second step reaches the key's record on
	// shard 0, forwarded if need be, and answers for it.
	mine, theirs := keyOf(t, 0, "foreign", 0), keyOf(t, 1, "foreign", 0)
	held, err := gridtest.Dial(t, tc.leader(0).addr).Reserve(gridtest.Context(t), reserveWith(mine, nil, 0))
	if err != nil || held.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("reserve: %v %v", held, err)
	}
	other, err := gridtest.Dial(t, tc.leader(1).addr).Reserve(gridtest.Context(t), reserveWith(theirs, nil, 0))
	if err != nil || other.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("reserve: %v %v", other, err)
	}
	release := &gridpb.ReleaseRequest{Namespace: []byte("ns"), Key: mine, Token: other.Token}
	got, err := gridtest.Dial(t, tc.leader(1).addr).Release(redirectOnly(t), release)
	if err != nil || got.Outcome != gridpb.Outcome_LEASE_LOST || got.State != gridpb.State_PROCESSING {
		t.Errorf("release with a foreign token at the token's leader, grid-redirect: %v %v; want LEASE_LOST of the PROCESSING record", got, err)
	}
	for _, nd := range tc.nodes {
		got, err := gridtest.Dial(t, nd.addr).Release(gridtest.Context(t), release)
		if err != nil || got.Outcome != gridpb.Outcome_LEASE_LOST || got.State != gridpb.State_PROCESSING {
			t.Errorf("release with a foreign token at %s: %v %v; want LEASE_LOST of the PROCESSING record", nd.id, got, err)
		}
		resp, err := gridtest.Dial(t, nd.addr).Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{
			settleOp(keyspace.OpRelease, mine, nil, other.Token), settleOp(keyspace.OpExtend, theirs, nil, other.Token),
		}})
		if err != nil || resp.Results[0].Outcome != gridpb.Outcome_LEASE_LOST || resp.Results[0].State != gridpb.State_PROCESSING ||
			resp.Results[1].Outcome != gridpb.Outcome_OK {
			t.Errorf("batch at %s: %v %v; want LEASE_LOST of the PROCESSING record, then OK", nd.id, resp, err)
		}
	}
}
