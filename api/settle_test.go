package api_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
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
	shardOf := func(d keyspace.Digest) int { return int(uint64(d.Slot(slots)) * uint64(shards) / uint64(slots)) }
	var out []placed
	for j := 0; len(out) < n && j < 10000; j++ {
		key, entity := []byte(fmt.Sprintf("%s-%d", prefix, j)), []byte(fmt.Sprintf("order-%s-%d", prefix, j))
		p := placed{key: key, entity: entity, own: shardOf(keyspace.RecordDigest("ns", key, nil)), shard: shardOf(keyspace.RecordDigest("ns", key, entity))}
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

// unary sends op as its own RPC.
func unary(c gridpb.GridClient, t *testing.T, op *gridpb.Op) (*gridpb.OpResult, error) {
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Complete:
		return c.Complete(ctx(t), o.Complete)
	case *gridpb.Op_Fail:
		return c.Fail(ctx(t), o.Fail)
	case *gridpb.Op_Release:
		return c.Release(ctx(t), o.Release)
	case *gridpb.Op_Extend:
		return c.Extend(ctx(t), o.Extend)
	}
	t.Fatalf("not a settle: %v", op)
	return nil, nil
}

// viaBatch sends op alone in a Batch.
func viaBatch(c gridpb.GridClient, t *testing.T, op *gridpb.Op) (*gridpb.OpResult, error) {
	resp, err := c.Batch(ctx(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{op}})
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
// version, and a lower version is STALE afterwards. A settle naming an
// entity that contradicts its token is refused, naming both shards; a lost
// token answers LEASE_LOST, not the OK of a key nobody holds.
func TestSettleFindsItsKeyWithoutTheEntity(t *testing.T) {
	n := gridtest.Start(t)
	c := dial(t, n.Addr())
	m, err := c.ClusterMap(ctx(t), &gridpb.ClusterMapRequest{})
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
	}{{"unary", unary}, {"batch", viaBatch}} {
		for _, op := range []keyspace.Op{keyspace.OpComplete, keyspace.OpFail, keyspace.OpRelease, keyspace.OpExtend} {
			p := keys[i]
			i++
			res, err := c.Reserve(ctx(t), reserveWith(p.key, p.entity, 5))
			if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
				t.Fatalf("reserve %s: %v %v", p.key, res, err)
			}
			if s, ok := keyspace.TokenShard(res.Token, int(m.ShardCount)); !ok || s != p.shard {
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
			rec, err := c.Get(ctx(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: p.key, Entity: p.entity})
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
			if r, err := c.Reserve(ctx(t), reserveWith(other, p.entity, 4)); err != nil || r.Outcome != gridpb.Outcome_STALE {
				t.Errorf("%s: reserve of version 4 after version 5 completed: %v %v, want STALE", send.name, r, err)
			}
		}
	}

	// An entity that places the key on another shard than the token names.
	p := keys[i]
	res, err := c.Reserve(ctx(t), reserveWith(p.key, p.entity, 1))
	if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("reserve: %v %v", res, err)
	}
	_, err = c.Complete(ctx(t), &gridpb.CompleteRequest{Namespace: []byte("ns"), Key: p.key, Entity: []byte("another-entity-x"), Token: res.Token})
	if other := keyspace.RecordDigest("ns", p.key, []byte("another-entity-x")); int(uint64(other.Slot(m.Slots))*uint64(m.ShardCount)/uint64(m.Slots)) != p.shard {
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), fmt.Sprintf("granted by shard %d", p.shard)) {
			t.Errorf("complete naming an entity of another shard: %v, want InvalidArgument naming shard %d", err, p.shard)
		}
	}
	// With the right entity it goes as it always did.
	if got, err := c.Complete(ctx(t), &gridpb.CompleteRequest{Namespace: []byte("ns"), Key: p.key, Entity: p.entity, Token: res.Token}); err != nil || got.Outcome != gridpb.Outcome_OK {
		t.Errorf("complete with the entity: %v %v", got, err)
	}
}

// TestSettleByTokenInACluster: on three nodes replicating two shards, a
// settle without the entity of a key placed on the other shard goes where
// its token says: forwarded by a node that does not lead that shard, or
// refused with a Redirect to that shard's leader when the client routes.
func TestSettleByTokenInACluster(t *testing.T) {
	tc := startCluster(t, 3, nil)
	keys := placedKeys(t, "cl", 3, testSlots, testShards)
	for s := range testShards {
		tc.leader(s)
	}
	for k, p := range keys {
		l := tc.leader(p.shard)
		res, err := dial(t, l.addr).Reserve(ctx(t), reserveWith(p.key, p.entity, 3))
		if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
			t.Fatalf("reserve %s: %v %v", p.key, res, err)
		}
		// A smart client asking a node that does not lead the token's shard
		// is redirected there, not to the key's own shard.
		f := tc.follower(p.shard)
		_, err = dial(t, f.addr).Extend(redirectOnly(t), &gridpb.ExtendRequest{Namespace: []byte("ns"), Key: p.key, Token: res.Token, LeaseMs: 60000})
		if rd := redirectDetail(err); rd == nil || !sameRedirect(rd, p.shard, l) {
			t.Errorf("key %d: extend with grid-redirect at a follower: %v (redirect %v), want a Redirect to shard %d at %s", k, err, rd, p.shard, l.id)
		}
		// A thin client asking any node is forwarded.
		for _, nd := range tc.nodes {
			got, err := dial(t, nd.addr).Extend(ctx(t), &gridpb.ExtendRequest{Namespace: []byte("ns"), Key: p.key, Token: res.Token, LeaseMs: 60000})
			if err != nil || got.Outcome != gridpb.Outcome_OK {
				t.Errorf("key %d: extend without the entity at %s: %v %v", k, nd.id, got, err)
			}
		}
		done, err := dial(t, f.addr).Batch(ctx(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{settleOp(keyspace.OpComplete, p.key, nil, res.Token)}})
		if err != nil || done.Results[0].Outcome != gridpb.Outcome_OK || done.Results[0].State != gridpb.State_COMPLETED {
			t.Fatalf("key %d: complete without the entity in a batch at a follower: %v %v", k, done, err)
		}
		stale, err := dial(t, l.addr).Reserve(ctx(t), reserveWith(append([]byte("next-"), p.key...), p.entity, 2))
		if err != nil || stale.Outcome != gridpb.Outcome_STALE {
			t.Errorf("key %d: version 2 after version 3 completed: %v %v, want STALE", k, stale, err)
		}
	}
}
