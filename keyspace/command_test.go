package keyspace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/l4xg/grid/digest"
	"pgregory.net/rapid"
)

var cmdOps = []Op{OpReserve, OpComplete, OpFail, OpRelease, OpExtend, OpForget, OpGet}

// cmdGen draws a command of a known op with any flag combination, filling
// exactly the fields its op encodes (so it must decode to itself).
func cmdGen(t *rapid.T) Command {
	c := Command{
		Op:     rapid.SampledFrom(cmdOps).Draw(t, "op"),
		Digest: digest.Digest{Hi: rapid.Uint64().Draw(t, "hi"), Lo: rapid.Uint64().Draw(t, "lo")},
	}
	flags := rapid.IntRange(0, cmdKnownFlags).Draw(t, "flags")
	c.HasFingerprint = flags&cmdFingerprint != 0
	c.HasEntity = flags&cmdEntity != 0
	c.HasRetryAfter = flags&cmdRetryAfter != 0
	c.Poison = flags&cmdPoison != 0
	c.HasRequestID = flags&cmdRequestID != 0
	c.ShowToken = flags&cmdShowToken != 0
	dur := func(label string) int64 { return rapid.Int64Range(0, 1<<62).Draw(t, label) }
	switch c.Op {
	case OpReserve:
		c.Lease, c.Retention = dur("lease"), dur("retention")
		c.MaxAttempts = rapid.Uint8().Draw(t, "max")
		if c.HasFingerprint {
			c.Fingerprint = rapid.Uint64().Draw(t, "fp")
		}
		if c.HasEntity {
			c.Entity = digest.Digest{Hi: rapid.Uint64().Draw(t, "ehi"), Lo: rapid.Uint64().Draw(t, "elo")}
			c.Version = rapid.Uint64().Draw(t, "version")
		}
		if c.HasRequestID {
			c.RequestID = rapid.Uint64().Draw(t, "request-id")
		}
	case OpComplete:
		c.Token, c.Retention = rapid.Uint64().Draw(t, "token"), dur("retention")
		if r := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "result"); len(r) > 0 {
			c.Result = r
		}
	case OpFail:
		c.Token, c.Retention = rapid.Uint64().Draw(t, "token"), dur("retention")
		if c.HasRetryAfter {
			c.RetryAfter = dur("retry-after")
		}
	case OpRelease:
		c.Token = rapid.Uint64().Draw(t, "token")
	case OpExtend:
		c.Token, c.Lease = rapid.Uint64().Draw(t, "token"), dur("lease")
	}
	return c
}

func cmdEntryGen(t *rapid.T) Entry {
	e := Entry{Now: rapid.Int64().Draw(t, "now"), Tick: rapid.Bool().Draw(t, "tick")}
	if rapid.Bool().Draw(t, "has-layout") {
		bits := uint8(rapid.IntRange(0, digest.MaxTokenBits).Draw(t, "token-bits"))
		e.HasLayout, e.Layout = true, digest.TokenLayout{Bits: bits, Shard: uint32(rapid.Uint64Range(0, 1<<bits-1).Draw(t, "token-shard"))}
	}
	for range rapid.IntRange(0, 20).Draw(t, "n") {
		e.Commands = append(e.Commands, cmdGen(t))
	}
	return e
}

// cmdEqual compares entries, treating a nil and an empty command list alike.
func cmdEqual(a, b Entry) bool {
	if len(a.Commands) == 0 && len(b.Commands) == 0 {
		a.Commands, b.Commands = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// TestEntryRoundTrip: every entry of known ops, with any flags, decodes to
// itself, and its encoding is a fixpoint of decode+encode.
func TestEntryRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := cmdEntryGen(t)
		prefix := rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, "prefix")
		b := AppendEntry(bytes.Clone(prefix), &e)
		if !bytes.Equal(b[:len(prefix)], prefix) {
			t.Fatalf("AppendEntry changed the bytes before it")
		}
		b = b[len(prefix):]
		got, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("DecodeEntry: %v", err)
		}
		if !cmdEqual(got, e) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
		}
		if again := AppendEntry(nil, &got); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b)
		}
	})
}

// TestEntryEveryOpAndFlag walks all ops x all flag combinations explicitly.
func TestEntryEveryOpAndFlag(t *testing.T) {
	for _, op := range cmdOps {
		for flags := range cmdKnownFlags + 1 {
			c := Command{Op: op, Digest: digest.Digest{Hi: 0x0102030405060708, Lo: 0x1112131415161718},
				HasFingerprint: flags&cmdFingerprint != 0, HasEntity: flags&cmdEntity != 0,
				HasRetryAfter: flags&cmdRetryAfter != 0, Poison: flags&cmdPoison != 0,
				HasRequestID: flags&cmdRequestID != 0, ShowToken: flags&cmdShowToken != 0}
			switch op {
			case OpReserve:
				c.Lease, c.Retention, c.MaxAttempts = 30_000, 1<<62, 255
				if c.HasFingerprint {
					c.Fingerprint = 1<<64 - 1
				}
				if c.HasEntity {
					c.Entity, c.Version = digest.Digest{Hi: 9, Lo: 10}, 1<<64-1
				}
				if c.HasRequestID {
					c.RequestID = RequestIDHash([]byte("request"))
				}
			case OpComplete:
				c.Token, c.Retention, c.Result = 1<<64-1, 0, []byte("result")
			case OpFail:
				c.Token, c.Retention = 1, 7
				if c.HasRetryAfter {
					c.RetryAfter = 0
				}
			case OpRelease:
				c.Token = 1 << 16
			case OpExtend:
				c.Token, c.Lease = 1<<48, 100
			}
			e := Entry{Now: -1, Commands: []Command{c, c}}
			got, err := DecodeEntry(AppendEntry(nil, &e))
			if err != nil || !cmdEqual(got, e) {
				t.Errorf("%v flags %06b: DecodeEntry = %+v, %v; want %+v", op, flags, got, err, e)
			}
		}
	}
	for _, tick := range []bool{false, true} {
		e := Entry{Now: 1<<63 - 1, Tick: tick}
		got, err := DecodeEntry(AppendEntry(nil, &e))
		if err != nil || !cmdEqual(got, e) {
			t.Errorf("empty entry, tick %v: DecodeEntry = %+v, %v", tick, got, err)
		}
	}
}

// cmdRaw builds entry bytes by hand: version, kind, stamp, count, then body.
func cmdRaw(version, kind byte, count uint64, body ...[]byte) []byte {
	b := []byte{version, kind}
	b = binary.BigEndian.AppendUint64(b, 1000)
	b = binary.AppendUvarint(b, count)
	for _, p := range body {
		b = append(b, p...)
	}
	return b
}

func cmdHead(op Op, flags byte) []byte {
	b := []byte{byte(op), flags}
	return append(b, make([]byte, 16)...) // digest 0
}

func uv(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func TestDecodeEntryErrors(t *testing.T) {
	valid := AppendEntry(nil, &Entry{Now: 5, Commands: []Command{
		{Op: OpReserve, Lease: 1000, Retention: 2000, MaxAttempts: 3, HasFingerprint: true, Fingerprint: 1, HasEntity: true, Version: 2},
		{Op: OpComplete, Token: 1 << 16, Retention: 5, Result: []byte("abc")},
		{Op: OpFail, Token: 2, Retention: 5, HasRetryAfter: true, RetryAfter: 9, Poison: true},
		{Op: OpRelease, Token: 3},
		{Op: OpExtend, Token: 4, Lease: 100},
		{Op: OpForget},
		{Op: OpGet},
	}})
	for n := range len(valid) {
		if _, err := DecodeEntry(valid[:n]); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("truncated to %d of %d bytes: err = %v, want ErrCorruptEntry", n, len(valid), err)
		}
	}
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version 0", cmdRaw(0, kindCommands, 0)},
		{"version 2 without its token layout", cmdRaw(2, kindCommands, 0)},
		{"version 3", cmdRaw(3, kindCommands, 0)},
		{"kind 0", cmdRaw(entryVersion, 0, 0)},
		{"kind 3", cmdRaw(entryVersion, 3, 0)},
		{"count above MaxEntryCommands", cmdRaw(entryVersion, kindCommands, MaxEntryCommands+1)},
		{"count above the bytes left", cmdRaw(entryVersion, kindCommands, 5, cmdHead(OpForget, 0))},
		{"count varint overflows", append(cmdRaw(entryVersion, kindCommands, 0)[:10], bytes.Repeat([]byte{0xff}, 11)...)},
		{"op 0", cmdRaw(entryVersion, kindCommands, 1, cmdHead(0, 0))},
		{"op 8 (unknown, state-changing)", cmdRaw(entryVersion, kindCommands, 1, cmdHead(OpGet+1, 0))},
		{"op 0x7f (unknown, state-changing)", cmdRaw(entryVersion, kindCommands, 1, cmdHead(0x7f, 0))},
		{"unknown flag 0x40", cmdRaw(entryVersion, kindCommands, 1, cmdHead(OpForget, 0x40))},
		{"unknown flag 0x80", cmdRaw(entryVersion, kindCommands, 1, cmdHead(OpGet, 0x80))},
		{"request id cut short", cmdRaw(entryVersion, kindCommands, 1, cmdHead(OpReserve, cmdRequestID), uv(1000), uv(0), []byte{3}, []byte{1, 2, 3})},
		{"lease above 2^62", cmdRaw(entryVersion, kindCommands, 1, cmdHead(OpReserve, 0), uv(1<<62+1), uv(0), []byte{3})},
		{"retention above 2^62", cmdRaw(entryVersion, kindCommands, 1, cmdHead(OpComplete, 0), uv(1), uv(1<<63), uv(0))},
		{"retry-after above 2^62", cmdRaw(entryVersion, kindCommands, 1, cmdHead(OpFail, cmdRetryAfter), uv(1), uv(0), uv(1<<64-1))},
		{"result longer than the entry", cmdRaw(entryVersion, kindCommands, 1, cmdHead(OpComplete, 0), uv(1), uv(0), uv(10), []byte("abc"))},
		{"ignorable payload longer than the entry", cmdRaw(entryVersion, kindCommands, 1, cmdHead(0x80, 0), uv(10), []byte("abc"))},
		{"trailing bytes", append(bytes.Clone(valid), 0)},
	}
	for _, c := range cases {
		if e, err := DecodeEntry(c.b); !errors.Is(err, ErrCorruptEntry) {
			t.Errorf("%s: DecodeEntry = %+v, %v; want ErrCorruptEntry", c.name, e, err)
		}
	}
	// Durations at the limit are fine.
	ok := cmdRaw(entryVersion, kindCommands, 1, cmdHead(OpExtend, 0), uv(1), uv(1<<62))
	if e, err := DecodeEntry(ok); err != nil || e.Commands[0].Lease != 1<<62 {
		t.Errorf("lease 2^62: DecodeEntry = %+v, %v", e, err)
	}
}

// TestEntryEncodingBeforeRequestIDs: a Reserve and a Get written before
// request ids and show_token existed (hand-made bytes, the old layout) still
// decode, without them; and commands that use neither encode to exactly
// those bytes, so entries written by this version and the one before agree.
func TestEntryEncodingBeforeRequestIDs(t *testing.T) {
	old := cmdRaw(entryVersion, kindCommands, 2,
		cmdHead(OpReserve, cmdFingerprint), uv(30_000), uv(7_000), []byte{5}, binary.BigEndian.AppendUint64(nil, 42),
		cmdHead(OpGet, 0))
	want := Entry{Now: 1000, Commands: []Command{
		{Op: OpReserve, Lease: 30_000, Retention: 7_000, MaxAttempts: 5, HasFingerprint: true, Fingerprint: 42},
		{Op: OpGet},
	}}
	got, err := DecodeEntry(old)
	if err != nil || !cmdEqual(got, want) {
		t.Fatalf("old entry: DecodeEntry = %+v, %v; want %+v", got, err, want)
	}
	if b := AppendEntry(nil, &want); !bytes.Equal(b, old) {
		t.Fatalf("AppendEntry = %x, the old encoding %x", b, old)
	}
	// The new fields are flagged, and a request id follows the fields the
	// Reserve had.
	want.Commands[0].HasRequestID, want.Commands[0].RequestID = true, 7
	want.Commands[1].ShowToken = true
	b := AppendEntry(nil, &want)
	reserveEnd := len(old) - 18 // the Get is op, flags and digest
	wantBytes := slices.Concat(old[:reserveEnd], binary.BigEndian.AppendUint64(nil, 7), old[reserveEnd:])
	wantBytes[12] |= cmdRequestID // version, kind, stamp, count, op
	wantBytes[reserveEnd+8+1] |= cmdShowToken
	if !bytes.Equal(b, wantBytes) {
		t.Fatalf("AppendEntry = %x, want %x", b, wantBytes)
	}
	if got, err := DecodeEntry(b); err != nil || !cmdEqual(got, want) {
		t.Fatalf("DecodeEntry = %+v, %v; want %+v", got, err, want)
	}
}

// TestDecodeEntryIgnorableOp: an op at or above opIgnorable is an optional
// hint from a newer binary: its length-prefixed payload is skipped, the
// commands around it decode, and Apply answers IGNORED without a change.
func TestDecodeEntryIgnorableOp(t *testing.T) {
	d := digest.Key("t", []byte("k"))
	reserve := AppendEntry(nil, &Entry{Commands: []Command{{Op: OpReserve, Digest: d, Lease: 1000, Retention: 1000, MaxAttempts: 3}}})
	b := cmdRaw(entryVersion, kindCommands, 3,
		cmdHead(0x80, 0), uv(3), []byte("xyz"),
		reserve[11:], // the reserve command alone
		cmdHead(0xff, 0), uv(0))
	e, err := DecodeEntry(b)
	if err != nil {
		t.Fatalf("DecodeEntry: %v", err)
	}
	if len(e.Commands) != 3 || e.Commands[0].Op != 0x80 || e.Commands[1].Op != OpReserve || e.Commands[2].Op != 0xff {
		t.Fatalf("decoded %+v", e.Commands)
	}
	m := NewMachine()
	res := m.Apply(1, &e, nil)
	if res[0].Outcome != OutcomeIgnored || res[2].Outcome != OutcomeIgnored || res[1].Outcome != OutcomeAcquired {
		t.Fatalf("results %+v", res)
	}
	if res[1].Token != 1<<16|1 || m.Len() != 1 {
		t.Fatalf("the reserve after an ignored op: token %d (want position 1), %d records", res[1].Token, m.Len())
	}
}

// TestAppendEntryIgnorableOp: AppendEntry must write what DecodeEntry reads,
// also for the ignorable ops DecodeEntry returns: re-encoding a decoded entry
// must give the same entry.
func TestAppendEntryIgnorableOp(t *testing.T) {
	e := Entry{Now: 1, Commands: []Command{
		{Op: 0x80, Digest: digest.Digest{Hi: 1, Lo: 2}},
		{Op: OpForget, Digest: digest.Digest{Hi: 3, Lo: 4}},
	}}
	got, err := DecodeEntry(AppendEntry(nil, &e))
	if err != nil || !cmdEqual(got, e) {
		t.Fatalf("DecodeEntry(AppendEntry(e)) = %+v, %v; want %+v", got, err, e)
	}
}

// TestDecodeEntryResultAliases: decoded results alias the entry bytes (as
// documented), and the Machine copies them, so reusing the entry buffer does
// not change a stored result.
func TestDecodeEntryResultAliases(t *testing.T) {
	d := digest.Key("t", []byte("k"))
	m := NewMachine()
	m.Apply(1, &Entry{Now: 1, Commands: []Command{{Op: OpReserve, Digest: d, Lease: 1000, Retention: 1000, MaxAttempts: 3}}}, nil)
	b := AppendEntry(nil, &Entry{Now: 2, Commands: []Command{{Op: OpComplete, Digest: d, Token: 1 << 16, Retention: 1000, Result: []byte("result")}}})
	e, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	m.Apply(2, &e, nil)
	copy(b[len(b)-6:], "XXXXXX")
	if string(e.Commands[0].Result) != "XXXXXX" {
		t.Fatalf("decoded result does not alias the entry: %q", e.Commands[0].Result)
	}
	if got := m.Get(d, 3, false); string(got.Result) != "result" {
		t.Fatalf("stored result changed with the entry buffer: %q", got.Result)
	}
}

func TestOpAndOutcomeNames(t *testing.T) {
	want := map[string]fmt.Stringer{
		"reserve": OpReserve, "complete": OpComplete, "fail": OpFail, "release": OpRelease,
		"extend": OpExtend, "forget": OpForget, "get": OpGet, "op(0)": Op(0), "op(8)": OpGet + 1, "op(128)": Op(0x80),
		"OK": OutcomeOK, "ACQUIRED": OutcomeAcquired, "BUSY": OutcomeBusy, "DUPLICATE": OutcomeDuplicate,
		"POISONED": OutcomePoisoned, "STALE": OutcomeStale, "MISMATCH": OutcomeMismatch,
		"LEASE_LOST": OutcomeLeaseLost, "IGNORED": OutcomeIgnored, "OUTCOME(?)": Outcome(0),
		"ABSENT": Absent, "PROCESSING": Processing, "COMPLETED": Completed, "FAILED": Failed,
		"STATE(?)": State(0),
	}
	for name, v := range want {
		if v.String() != name {
			t.Errorf("%#v.String() = %q, want %q", v, v.String(), name)
		}
	}
	if s := Outcome(200).String(); s != "OUTCOME(?)" {
		t.Errorf("Outcome(200) = %q", s)
	}
	if s := State(6).String(); s != "STATE(?)" {
		t.Errorf("State(6) = %q", s)
	}
}

// FuzzDecodeEntry: DecodeEntry never panics; whatever it accepts is an entry
// the encoder reproduces (decode(encode(e)) == e, and encode is a fixpoint),
// and that a Machine applies without panicking.
//
// Not asserted: AppendEntry(DecodeEntry(b)) == b byte for byte. DecodeEntry
// accepts non-minimal uvarints and ignores flag bits 4-7, so distinct byte
// strings decode to one entry (harmless for replicas, which all decode the
// same bytes the same way); entries with ignorable ops are
// TestAppendEntryIgnorableOp's bug.
//
//	go test -fuzz FuzzDecodeEntry -fuzztime 60s ./keyspace/
func FuzzDecodeEntry(f *testing.F) {
	d := digest.Key("t", []byte("k"))
	for _, e := range []Entry{
		{},
		{Now: 1, Tick: true},
		{Now: 1, Tick: true, HasLayout: true, Layout: digest.TokenLayout{Shard: 5, Bits: 3}},
		{Now: 2, Commands: []Command{{Op: OpReserve, Digest: d, Lease: 1000, Retention: 5000, MaxAttempts: 3,
			HasFingerprint: true, Fingerprint: 7, HasEntity: true, Entity: d, Version: 9}}},
		{Now: 3, Commands: []Command{{Op: OpComplete, Digest: d, Token: 1 << 16, Retention: 1000, Result: []byte("ok")},
			{Op: OpFail, Digest: d, Token: 5, HasRetryAfter: true, RetryAfter: 10, Poison: true},
			{Op: OpRelease, Digest: d, Token: 6}, {Op: OpExtend, Digest: d, Token: 7, Lease: 100}, {Op: OpForget, Digest: d},
			{Op: OpGet, Digest: d}}},
	} {
		f.Add(AppendEntry(nil, &e))
	}
	f.Add(cmdRaw(entryVersion, kindCommands, 2, cmdHead(0x80, 0), uv(2), []byte("hi"), cmdHead(OpForget, 0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptEntry) {
				t.Fatalf("error %v does not wrap ErrCorruptEntry", err)
			}
			return
		}
		ignorable := false
		for _, c := range e.Commands {
			ignorable = ignorable || c.Op >= opIgnorable
		}
		if !ignorable {
			enc := AppendEntry(nil, &e)
			if len(enc) > len(b) {
				t.Fatalf("canonical encoding %x is longer than the accepted input %x", enc, b)
			}
			got, err := DecodeEntry(enc)
			if err != nil {
				t.Fatalf("re-encoded entry does not decode: %v", err)
			}
			for i := range got.Commands {
				if len(got.Commands[i].Result) == 0 && len(e.Commands[i].Result) == 0 {
					got.Commands[i].Result = e.Commands[i].Result
				}
			}
			if !cmdEqual(got, e) {
				t.Fatalf("decode(encode(e)) != e:\n got %+v\nwant %+v", got, e)
			}
			if again := AppendEntry(nil, &got); !bytes.Equal(again, enc) {
				t.Fatalf("encoding is not a fixpoint")
			}
		}
		m := NewMachine()
		if res := m.Apply(1, &e, nil); len(res) != len(e.Commands) {
			t.Fatalf("Apply returned %d results for %d commands", len(res), len(e.Commands))
		}
		ksCheckMachine(t, m)
	})
}
