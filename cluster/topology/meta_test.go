package topology

import (
	"errors"
	"strings"
	"testing"
)

func TestNodeMetaRoundTrip(t *testing.T) {
	m := NodeMeta{ID: "node-1", GRPCAddr: "10.0.0.1:7420", RaftAddr: "10.0.0.1:7421", HTTPAddr: "10.0.0.1:7423"}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNodeMeta(b)
	if err != nil || got != m {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	// A newer version may append fields: this binary reads what it knows.
	newer := append([]byte{metaVersion + 1}, b[1:]...)
	if got, err := DecodeNodeMeta(append(newer, 9, 9)); err != nil || got != m {
		t.Fatalf("newer version: %+v, %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"empty":     nil,
		"version 0": append([]byte{0}, b[1:]...),
		"truncated": b[:len(b)-1],
		"trailing":  append(b[:len(b):len(b)], 0),
		"bad id":    {metaVersion, 0, 1, ' ', 0, 0, 0},
		"bad flags": append([]byte{metaVersion, 0x80}, b[2:]...),
	} {
		if _, err := DecodeNodeMeta(bad); !errors.Is(err, ErrMeta) {
			t.Errorf("%s: err = %v, want ErrMeta", name, err)
		}
	}
	big := NodeMeta{ID: "x", GRPCAddr: strings.Repeat("a", 200), RaftAddr: strings.Repeat("b", 200), HTTPAddr: strings.Repeat("c", 200)}
	if _, err := big.MarshalBinary(); !errors.Is(err, ErrMeta) {
		t.Fatalf("oversized meta: %v", err)
	}
}

func TestNodeMetaFlags(t *testing.T) {
	m := NodeMeta{ID: "node-1", GRPCAddr: "a:1", RaftAddr: "a:2", Incarnation: 7}
	for _, flags := range []byte{0, MetaLeaving, MetaDiskFull, MetaLeaving | MetaDiskFull} {
		b, err := m.Encode(flags)
		if err != nil {
			t.Fatal(err)
		}
		got, gotFlags, err := DecodeMeta(b)
		if err != nil || got != m || gotFlags != flags {
			t.Fatalf("flags %#x: %+v, %#x, %v", flags, got, gotFlags, err)
		}
	}
	// Version 2 knew only the leaving flag: a version-2 meta with the disk
	// flag is not one a node ever sent.
	b, _ := m.Encode(MetaDiskFull)
	b[0] = 2
	if _, _, err := DecodeMeta(b); !errors.Is(err, ErrMeta) {
		t.Fatalf("disk flag in version 2: %v", err)
	}
	// A newer version's flags are ignored, as its appended fields are.
	b, _ = m.Encode(MetaDiskFull)
	b[0], b[1] = metaVersion+1, b[1]|0x40
	if got, _, err := DecodeMeta(b); err != nil || got != m {
		t.Fatalf("newer version's flags: %+v, %v", got, err)
	}
}

func FuzzDecodeNodeMeta(f *testing.F) {
	b, _ := NodeMeta{ID: "n1", GRPCAddr: "a:1", RaftAddr: "a:2"}.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeNodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrMeta) {
				t.Fatalf("error not ErrMeta: %v", err)
			}
			return
		}
		if _, err := m.MarshalBinary(); err != nil {
			t.Fatalf("decoded meta does not encode: %v", err)
		}
	})
}
