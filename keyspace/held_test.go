package keyspace

import (
	"math"
	"testing"

	"github.com/l4xg/grid/digest"
	"pgregory.net/rapid"
)

// TestSettleWithoutTheEntity: a key reserved with an entity lives under the
// entity's slot bits; each settle that names the key alone (or another
// entity) acts on it by its token, and Complete still commits the entity's
// version, so a lower version is STALE afterwards.
func TestSettleWithoutTheEntity(t *testing.T) {
	const ns = "shop"
	key, entity := []byte("evt-1"), []byte("order-1")
	placed := digest.Record(ns, key, entity)
	bare := digest.Record(ns, key, nil)
	wrong := digest.Record(ns, key, []byte("order-2"))
	reserve := func(k []byte, version uint64) Command {
		return Command{Op: OpReserve, Digest: digest.Record(ns, k, entity), Lease: 1000, MaxAttempts: 3, Retention: 1000,
			HasEntity: true, Entity: digest.Entity(ns, entity), Version: version}
	}
	m := NewMachine()
	index := uint64(0)
	apply := func(now int64, c Command) Result {
		index++
		return m.Apply(index, &Entry{Now: now, HasLayout: true, Layout: digest.TokenLayout{Shard: 3, Bits: 3}, Commands: []Command{c}}, nil)[0]
	}
	r := apply(1, reserve(key, 5))
	if r.Outcome != OutcomeAcquired {
		t.Fatalf("reserve: %v", r.Outcome)
	}
	tok := r.Token
	if r := apply(2, Command{Op: OpExtend, Digest: bare, Token: tok, Lease: 5000}); r.Outcome != OutcomeOK || r.Deadline != 5002 {
		t.Fatalf("extend without the entity: %v, deadline %d", r.Outcome, r.Deadline)
	}
	if r := apply(3, Command{Op: OpExtend, Digest: wrong, Token: tok, Lease: 5000}); r.Outcome != OutcomeOK {
		t.Fatalf("extend with another entity: %v", r.Outcome)
	}
	// A lost token gets LEASE_LOST with or without the entity, a Release
	// too (not the OK of a key nobody holds).
	for _, op := range []Op{OpComplete, OpFail, OpRelease, OpExtend} {
		if r := apply(4, Command{Op: op, Digest: bare, Token: tok + 8, Lease: 1000, Retention: 1000}); r.Outcome != OutcomeLeaseLost || r.State != Processing || r.Token != 0 {
			t.Fatalf("%v with a lost token, without the entity: %v %v token %d", op, r.Outcome, r.State, r.Token)
		}
	}
	if r := apply(5, Command{Op: OpComplete, Digest: bare, Token: tok, Retention: 1000, Result: []byte("done")}); r.Outcome != OutcomeOK || r.State != Completed || !r.Found {
		t.Fatalf("complete without the entity: %v %v found %v", r.Outcome, r.State, r.Found)
	}
	// A key with no record here: the settle says it found none, and the
	// API asks the key's own shard.
	for _, op := range []Op{OpComplete, OpFail, OpRelease, OpExtend} {
		r := apply(5, Command{Op: op, Digest: digest.Record(ns, []byte("elsewhere"), nil), Token: tok, Lease: 1000, Retention: 1000})
		if r.Found || r.State != Absent {
			t.Fatalf("%v of a key with no record here: %v %v found %v", op, r.Outcome, r.State, r.Found)
		}
	}
	if r := apply(6, Command{Op: OpComplete, Digest: bare, Token: tok, Retention: 1000}); r.Outcome != OutcomeOK || !r.Repeated || string(r.Result) != "done" {
		t.Fatalf("complete repeated without the entity: %v repeated %v result %q", r.Outcome, r.Repeated, r.Result)
	}
	if got := m.Get(placed, 0, false); got.State != Completed {
		t.Fatalf("the record under the entity: %v", got.State)
	}
	if got := m.Get(bare, 0, false); got.State != Absent {
		t.Fatalf("a record appeared under the bare key: %v", got.State)
	}
	if r := apply(7, reserve([]byte("evt-2"), 4)); r.Outcome != OutcomeStale {
		t.Fatalf("reserve of version 4 after version 5 completed: %v, want STALE", r.Outcome)
	}
	// Fail and Release without the entity, on fresh leases.
	for i, op := range []Op{OpFail, OpRelease} {
		k := []byte{'k', byte('0' + i)}
		r := apply(8, reserve(k, uint64(10+i)))
		if r.Outcome != OutcomeAcquired {
			t.Fatalf("reserve %s: %v", k, r.Outcome)
		}
		want := map[Op]State{OpFail: Failed, OpRelease: Absent}[op]
		if r := apply(9, Command{Op: op, Digest: digest.Record(ns, k, nil), Token: r.Token, Retention: 1000}); r.Outcome != OutcomeOK || r.State != want {
			t.Fatalf("%v without the entity: %v %v, want OK %v", op, r.Outcome, r.State, want)
		}
		if got := m.Get(digest.Record(ns, k, entity), 0, false); got.State != want {
			t.Fatalf("after %v: the record is %v", op, got.State)
		}
	}
}

// TestSettleBothPlacements: a key held twice on one shard, with an entity
// and without, is settled by token under either digest: each settle acts on
// the record its token holds.
func TestSettleBothPlacements(t *testing.T) {
	m := NewMachine()
	bare := digest.Record("ns", []byte("k"), nil)
	placed := bare
	placed.Hi ^= 0x5a5a5a5a // other slot bits: as an entity on the same shard would place it
	res := m.Apply(1, &Entry{Now: 1, HasLayout: true, Commands: []Command{
		{Op: OpReserve, Digest: bare, Lease: 1000, MaxAttempts: 1, Retention: 1000},
		{Op: OpReserve, Digest: placed, Lease: 1000, MaxAttempts: 1, Retention: 1000},
	}}, nil)
	tBare, tPlaced := res[0].Token, res[1].Token
	res = m.Apply(2, &Entry{Now: 2, HasLayout: true, Commands: []Command{
		{Op: OpComplete, Digest: bare, Token: tPlaced, Retention: 1000},
		{Op: OpRelease, Digest: placed, Token: tBare},
	}}, nil)
	if res[0].Outcome != OutcomeOK || res[1].Outcome != OutcomeOK {
		t.Fatalf("settles across placements: %v %v", res[0].Outcome, res[1].Outcome)
	}
	if got := m.Get(placed, 0, false); got.State != Completed {
		t.Fatalf("placed record %v, want COMPLETED", got.State)
	}
	if got := m.Get(bare, 0, false); got.State != Absent {
		t.Fatalf("bare record %v, want released", got.State)
	}
}

// TestOldEntriesSettleByTheExactDigest: an entry without a token layout,
// as a binary from before wrote it, is applied as that binary applied it:
// a settle naming the key under other slot bits finds nothing. A replica
// replaying such an entry after an upgrade ends where the others did.
func TestOldEntriesSettleByTheExactDigest(t *testing.T) {
	for _, layout := range []bool{false, true} {
		m := NewMachine()
		bare := digest.Record("ns", []byte("k"), nil)
		placed := digest.Record("ns", []byte("k"), []byte("order-1"))
		tok := m.Apply(1, &Entry{Now: 1, HasLayout: layout, Commands: []Command{
			{Op: OpReserve, Digest: placed, Lease: 1000, MaxAttempts: 1, Retention: 1000},
		}}, nil)[0].Token
		if want := uint64(1 << 16); tok != want {
			t.Fatalf("layout %v: token %d, want %d", layout, tok, want)
		}
		r := m.Apply(2, &Entry{Now: 2, HasLayout: layout, Commands: []Command{{Op: OpComplete, Digest: bare, Token: tok, Retention: 1000}}}, nil)[0]
		if got := r.Outcome == OutcomeOK; got != layout || r.Found != layout {
			t.Fatalf("entry with a layout %v: complete without the entity %v (found %v)", layout, r.Outcome, r.Found)
		}
	}
}

// TestTablePlacements: placements finds exactly what a scan of every
// record finds, for digests crowded onto shared home slots and Lo values
// (runs that wrap, keys that differ only in slot bits, or in other bits).
func TestTablePlacements(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		digests := rapid.Custom(func(t *rapid.T) digest.Digest {
			lo := rapid.Uint64Range(0, 3).Draw(t, "lo")
			if rapid.Bool().Draw(t, "top") {
				lo = math.MaxUint64 - lo
			}
			upper := rapid.Uint64Range(0, 2).Draw(t, "upper") << 32
			if rapid.Bool().Draw(t, "segment") {
				upper |= 1 << 60
			}
			return digest.Digest{Hi: upper | rapid.Uint64Range(0, 3).Draw(t, "slot")<<30, Lo: lo}
		})
		tab, model := NewTable(), map[digest.Digest]Record{}
		for i := range rapid.IntRange(0, 200).Draw(t, "ops") {
			d := digests.Draw(t, "d")
			if rapid.IntRange(0, 3).Draw(t, "delete") == 0 {
				tab.Delete(d)
				delete(model, d)
				continue
			}
			r := Record{Token: rapid.Uint64Range(1, 6).Draw(t, "token"), Meta: uint64(i) | 1}
			tab.Put(d, r)
			model[d] = r
		}
		for range 20 {
			d, tok := digests.Draw(t, "query"), rapid.Uint64Range(1, 6).Draw(t, "query-token")
			var wantHeld, wantFirst digest.Digest
			var holds, placed bool
			for _, k := range tabSortedKeys(model) {
				if k.Lo != d.Lo || k.Hi&^digest.SlotMask != d.Hi&^digest.SlotMask {
					continue
				}
				if !placed {
					wantFirst, placed = k, true
				}
				if model[k].Token == tok && !holds {
					wantHeld, holds = k, true
				}
			}
			held, gotHolds, first, gotPlaced := tab.placements(d, tok)
			if gotPlaced != placed || gotPlaced && first != wantFirst {
				t.Fatalf("placements(%v): first %v %v, want %v %v", d, first, gotPlaced, wantFirst, placed)
			}
			// Several records may hold one token here (the machine grants
			// each once): any of them will do, the lowest is found.
			if gotHolds != holds || gotHolds && held != wantHeld {
				t.Fatalf("placements(%v, token %d): %v %v, want %v %v", d, tok, held, gotHolds, wantHeld, holds)
			}
		}
	})
}
