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
