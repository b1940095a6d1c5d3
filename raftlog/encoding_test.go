package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func logsEqual(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) &&
		a.AppendedAt.Equal(b.AppendedAt) && a.AppendedAt.IsZero() == b.AppendedAt.IsZero()
}

func sampleLogs() []*raft.Log {
	return []*raft.Log{
		{},
		{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("hello")},
		{Index: 2, Term: 1, Type: raft.LogNoop},
		{Index: 3, Term: 2, Type: raft.LogConfiguration, Data: bytes.Repeat([]byte{0xab}, 1000), Extensions: []byte("ext")},
		{Index: 4, Term: 2, Type: raft.LogBarrier, Extensions: []byte{0}},
		{Index: math.MaxUint64, Term: math.MaxUint64, Type: raft.LogType(255), Data: []byte{0}, AppendedAt: time.Unix(math.MaxInt64/2, 999_999_999)},
		{Index: 5, Term: 3, Type: raft.LogCommand, Data: []byte("x"), AppendedAt: time.Now()}, // with monotonic reading
		{Index: 6, Term: 3, Type: raft.LogCommand, AppendedAt: time.Date(1900, 1, 1, 0, 0, 0, 1, time.UTC)},
		{Index: 7, Term: 3, Type: raft.LogCommand, AppendedAt: time.Unix(0, 0)},
	}
}

func TestEncodingRoundTrip(t *testing.T) {
	for i, want := range sampleLogs() {
		enc := appendLog(nil, want)
		var got raft.Log
		if err := decodeLog(enc, &got); err != nil {
			t.Fatalf("log %d: decode: %v", i, err)
		}
		if !logsEqual(&got, want) {
			t.Fatalf("log %d: round trip mismatch:\n got %+v\nwant %+v", i, got, *want)
		}
		if re := appendLog(nil, &got); !bytes.Equal(re, enc) {
			t.Fatalf("log %d: re-encoding differs: %x vs %x", i, re, enc)
		}
	}
}

func TestEncodingIsCompact(t *testing.T) {
	l := &raft.Log{Index: 1000, Term: 5, Type: raft.LogCommand, Data: make([]byte, 256)}
	// 3 header bytes + index(2) + term(1) + len(2) + 256 + extlen(1).
	if n := len(appendLog(nil, l)); n != 265 {
		t.Fatalf("encoded size = %d, want 265", n)
	}
}

func TestDecodeCopiesInput(t *testing.T) {
	enc := appendLog(nil, &raft.Log{Index: 1, Data: []byte("data"), Extensions: []byte("ext")})
	var got raft.Log
	if err := decodeLog(enc, &got); err != nil {
		t.Fatal(err)
	}
	for i := range enc {
		enc[i] = 0xff
	}
	if string(got.Data) != "data" || string(got.Extensions) != "ext" {
		t.Fatalf("decoded log aliases its input: %q %q", got.Data, got.Extensions)
	}
	// Appending to Data must not overwrite Extensions (shared allocation).
	_ = append(got.Data, 'X')
	if string(got.Extensions) != "ext" {
		t.Fatalf("append to Data clobbered Extensions: %q", got.Extensions)
	}
}

func TestDecodeRejectsCorruption(t *testing.T) {
	valid := appendLog(nil, &raft.Log{Index: 300, Term: 7, Type: raft.LogCommand,
		Data: []byte("payload"), Extensions: []byte("e"), AppendedAt: time.Unix(1700000000, 5)})

	cases := map[string][]byte{
		"empty":                nil,
		"bad version":          append([]byte{2}, valid[1:]...),
		"version zero":         append([]byte{0}, valid[1:]...),
		"unknown flag":         append([]byte{valid[0], valid[1], 0x02}, valid[3:]...),
		"trailing byte":        append(append([]byte{}, valid...), 0),
		"non-minimal index":    {1, 0, 0, 0x80, 0x00, 0, 0, 0},
		"overflowing varint":   append([]byte{1, 0, 0}, bytes.Repeat([]byte{0xff}, 11)...),
		"data length too long": {1, 0, 0, 1, 1, 5, 'a', 0},
		"huge data length":     {1, 0, 0, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"nanoseconds too big":  {1, 0, flagAppendedAt, 1, 1, 0, 0, 2, 0x80, 0x94, 0xeb, 0xdc, 0x03},
		"zero time with flag":  append(binary.AppendVarint([]byte{1, 0, flagAppendedAt, 1, 1, 0, 0}, time.Time{}.Unix()), 0),
	}
	for i := range valid {
		cases[fmt.Sprintf("truncated to %d bytes", i)] = valid[:i]
	}
	for name, b := range cases {
		before := raft.Log{Index: 42, Data: []byte("keep")}
		l := before
		err := decodeLog(b, &l)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decode(%x) error = %v, want ErrCorrupt", name, b, err)
		}
		if !logsEqual(&l, &before) {
			t.Errorf("%s: failed decode modified the log: %+v", name, l)
		}
	}
}

// FuzzDecodeLog checks that decodeLog never panics, and that whatever it
// accepts is canonical: re-encoding the decoded log gives the input back.
// Its seed corpus (below and in testdata/fuzz/FuzzDecodeLog) runs with
// plain `go test`.
func FuzzDecodeLog(f *testing.F) {
	for _, l := range sampleLogs() {
		f.Add(appendLog(nil, l))
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0, 0x80})
	f.Add([]byte{1, 0, 1, 0, 0, 0, 0, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if err := decodeLog(b, &l); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if re := appendLog(nil, &l); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input:\n in %x\nout %x", b, re)
		}
	})
}

// readBytes and readUvarint name the field in their errors, word for word
// as before readBytes stopped building its field's name at every call.
func TestReadFieldErrors(t *testing.T) {
	overflow := bytes.Repeat([]byte{0xff}, 11)
	for _, c := range []struct {
		err  error
		want string
	}{
		{second(readBytes(nil, "entry")), "raftlog: corrupt data: truncated or overflowing entry length"},
		{second(readBytes(overflow, "data")), "raftlog: corrupt data: truncated or overflowing data length"},
		{second(readBytes([]byte{0x80, 0x00}, "stable key")), "raftlog: corrupt data: non-minimal encoding of stable key length"},
		{second(readBytes([]byte{5, 'a'}, "entry")), "raftlog: corrupt data: entry length 5 exceeds remaining 1 bytes"},
		{second(readUvarint(nil, "group")), "raftlog: corrupt data: truncated or overflowing group"},
		{second(readUvarint([]byte{0x81, 0x00}, "index")), "raftlog: corrupt data: non-minimal encoding of index"},
	} {
		if c.err == nil || c.err.Error() != c.want || !errors.Is(c.err, ErrCorrupt) {
			t.Errorf("error %v, want %q wrapping ErrCorrupt", c.err, c.want)
		}
	}
}

// second returns the error of a reader's three results.
func second[V any](_ V, _ []byte, err error) error { return err }

// readBytes allocates nothing when it succeeds: replay calls it for every
// entry.
func TestReadBytesAllocatesNothing(t *testing.T) {
	b := append([]byte{3}, "abc"...)
	what := "entry"
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := readBytes(b, what); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("readBytes: %v allocations a call", n)
	}
}
