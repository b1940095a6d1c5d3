package raftlog

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

func sampleHeaders() []header {
	long := strings.Repeat("h", maxAddrLen-5) + ":7421"
	return []header{
		{group: 0, addr: "127.0.0.1:1"},
		{group: 7, addr: "node-3.grid.internal:7421"},
		{group: math.MaxUint64, addr: "[::1]:65535"},
		{group: 1 << 40, addr: long},
		{append: true, addr: "127.0.0.1:7421"},
	}
}

// TestHeaderRoundTrip checks that readHeader gives back what appendHeader
// wrote and reads not one byte of the Raft stream that follows.
func TestHeaderRoundTrip(t *testing.T) {
	for _, want := range sampleHeaders() {
		enc := appendHeader(nil, want)
		if len(enc) > MaxHeaderLen {
			t.Fatalf("%+v: header of %d bytes, max %d", want, len(enc), MaxHeaderLen)
		}
		r := bytes.NewReader(append(enc, "raft"...))
		got, err := readHeader(r)
		if err != nil {
			t.Fatalf("%+v: %v", want, err)
		}
		if got != want {
			t.Fatalf("round trip: got %+v, want %+v", got, want)
		}
		if r.Len() != len("raft") {
			t.Fatalf("%+v: readHeader left %d bytes, want the 4 of the stream", want, r.Len())
		}
	}
}

func TestReadHeaderRejects(t *testing.T) {
	good := appendHeader(nil, header{group: 1, addr: "127.0.0.1:7421"})
	with := func(i int, b byte) []byte { c := bytes.Clone(good); c[i] = b; return c }
	withAddr := func(addr string) []byte {
		c := bytes.Clone(good[:headerFixedLen])
		c[headerFixedLen-1] = byte(len(addr))
		return append(c, addr...)
	}
	cases := map[string][]byte{
		"empty":          nil,
		"short":          good[:5],
		"http":           []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"magic":          with(0, 'X'),
		"version 0":      with(4, 0),
		"version 3":      with(4, 3),
		"append, group":  with(4, muxVersionAppend),
		"truncated addr": good[:len(good)-1],
		"empty addr":     withAddr(""),
		"no port":        withAddr("127.0.0.1"),
		"space":          withAddr("a b:1"),
		"control byte":   withAddr("a\x00:1"),
		"non-ascii":      withAddr("h\xc3\xa9:1"),
	}
	for name, b := range cases {
		if h, err := readHeader(bytes.NewReader(b)); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: readHeader(%q) = %+v, %v; want ErrBadHeader", name, b, h, err)
		}
	}
}

// FuzzReadHeader checks that readHeader never panics, that its errors wrap
// ErrBadHeader, and that whatever it accepts is canonical: re-encoding the
// header gives back exactly the bytes it consumed.
func FuzzReadHeader(f *testing.F) {
	for _, h := range sampleHeaders() {
		f.Add(appendHeader(nil, h))
		f.Add(append(appendHeader(nil, h), 0, 1, 2))
	}
	f.Add([]byte{})
	f.Add([]byte("L4XM"))
	f.Add([]byte("L4XM\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00"))
	f.Add([]byte("L4XM\x01\x00\x00\x00\x00\x00\x00\x00\x01\xffa:1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		h, err := readHeader(r)
		if err != nil {
			if !errors.Is(err, ErrBadHeader) {
				t.Fatalf("error does not wrap ErrBadHeader: %v", err)
			}
			return
		}
		consumed := b[:len(b)-r.Len()]
		if re := appendHeader(nil, h); !bytes.Equal(re, consumed) {
			t.Fatalf("accepted non-canonical header:\n in %x\nout %x", consumed, re)
		}
		if err := checkAddr(h.addr); err != nil {
			t.Fatalf("accepted address %q: %v", h.addr, err)
		}
	})
}
