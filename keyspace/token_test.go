package keyspace

import (
	"testing"

	"github.com/l4xg/grid/digest"
)

// TestMachineGrantsTokensOfItsLayout: an entry with a layout grants tokens
// naming its shard; records granted before, by an entry without one, keep
// their tokens and can still be settled with them.
func TestMachineGrantsTokensOfItsLayout(t *testing.T) {
	m := NewMachine()
	d1, d2 := digest.Key("ns", []byte("a")), digest.Key("ns", []byte("b"))
	reserve := func(d digest.Digest) Command {
		return Command{Op: OpReserve, Digest: d, Lease: 1000, MaxAttempts: 3, Retention: 1000}
	}
	r := m.Apply(7, &Entry{Now: 1, Commands: []Command{reserve(d1)}}, nil)
	if r[0].Token != 7<<16 {
		t.Fatalf("entry without a layout: token %d, want %d", r[0].Token, 7<<16)
	}
	l := digest.TokenLayout{Shard: 5, Bits: 3}
	r = m.Apply(8, &Entry{Now: 2, HasLayout: true, Layout: l, Commands: []Command{reserve(d2), reserve(d2)}}, nil)
	if want := uint64(8<<16)<<3 | 5; r[0].Token != want || r[0].Outcome != OutcomeAcquired {
		t.Fatalf("token %d (%v), want %d", r[0].Token, r[0].Outcome, want)
	}
	r = m.Apply(9, &Entry{Now: 3, HasLayout: true, Layout: l, Commands: []Command{{Op: OpComplete, Digest: d1, Token: 7 << 16, Retention: 1000}}}, nil)
	if r[0].Outcome != OutcomeOK || r[0].State != Completed {
		t.Fatalf("complete with the token of the old layout: %v %v", r[0].Outcome, r[0].State)
	}
}

// TestEntryLayoutRoundTrip: the layout survives encoding (version 2), an
// entry without one keeps version 1, and a bad layout or version is
// refused.
func TestEntryLayoutRoundTrip(t *testing.T) {
	for _, e := range []Entry{
		{Now: 5, Commands: []Command{{Op: OpForget}}},
		{Now: 5, HasLayout: true, Layout: digest.TokenLayout{Shard: 5, Bits: 3}, Commands: []Command{{Op: OpForget}}},
		{Now: 5, Tick: true, HasPolicy: true, Policy: TierPolicy{HotWindow: 9}, HasLayout: true, Layout: digest.TokenLayout{Shard: 1<<16 - 1, Bits: 16}},
		{Now: 5, HasLayout: true},
	} {
		b := AppendEntry(nil, &e)
		want := byte(1)
		if e.HasLayout {
			want = 2
		}
		if b[0] != want {
			t.Fatalf("%+v: version %d, want %d", e, b[0], want)
		}
		got, err := DecodeEntry(b)
		if err != nil || got.HasLayout != e.HasLayout || got.Layout != e.Layout || got.Now != e.Now || len(got.Commands) != len(e.Commands) {
			t.Fatalf("%+v: decoded %+v %v", e, got, err)
		}
	}
	bad := AppendEntry(nil, &Entry{Now: 5, HasLayout: true, Layout: digest.TokenLayout{Shard: 1, Bits: 1}})
	bad[10] = 0 // shard 1 in 0 bits
	if _, err := DecodeEntry(bad); err == nil {
		t.Error("a shard that does not fit its bits decoded")
	}
	bad[0] = 3
	if _, err := DecodeEntry(bad); err == nil {
		t.Error("version 3 decoded")
	}
}
