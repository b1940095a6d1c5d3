package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func exampleMap() *Map {
	w := newWorld(8, 3, "a", "b", "c", "d")
	w.m.Epoch = 42
	w.m.ShardReplicas = make([][]NodeID, 8)
	for _, mv := range Plan(w.m, w.alive, w.deadFor) {
		if err := w.m.ApplyMove(mv); err != nil {
			panic(err)
		}
	}
	w.m.Leaders = make([]NodeID, 8)
	w.m.Leaders[3] = w.m.ShardReplicas[3][1]
	d := w.m.Nodes["d"]
	d.State, d.HTTPAddr = NodeDraining, "d:7423"
	w.m.Nodes["d"] = d
	w.m.Nodes["old"] = NodeInfo{ID: "old", State: NodeRemoved}
	return w.m
}

func TestMapRoundTrip(t *testing.T) {
	m := exampleMap()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMap(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
	}
	again, _ := got.MarshalBinary()
	if !bytes.Equal(again, b) {
		t.Fatal("encoding not canonical")
	}
	c := m.Clone()
	c.ShardReplicas[0][0], c.Nodes["a"] = "zz", NodeInfo{}
	if !reflect.DeepEqual(got, m) {
		t.Fatal("Clone shares memory with the original")
	}
	// JSON is for people and the status RPC; it round-trips too.
	j, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON Map
	if err := json.Unmarshal(j, &fromJSON); err != nil || !reflect.DeepEqual(&fromJSON, m) {
		t.Fatalf("json round trip: %v\n%s", err, j)
	}
	if !bytes.Contains(j, []byte(`"state":"draining"`)) {
		t.Fatalf("json shows states by name: %s", j)
	}
}

func TestMapValidate(t *testing.T) {
	for name, break_ := range map[string]func(m *Map){
		"zero slots":          func(m *Map) { m.Slots = 0 },
		"more shards":         func(m *Map) { m.Shards = 9 },
		"unknown replica":     func(m *Map) { m.ShardReplicas[0][1] = "nope" },
		"duplicate replica":   func(m *Map) { m.ShardReplicas[0][1] = m.ShardReplicas[0][0] },
		"unsorted":            func(m *Map) { r := m.ShardReplicas[0]; r[1], r[2] = r[2], r[1] },
		"removed holds":       func(m *Map) { n := m.Nodes["a"]; n.State = NodeRemoved; m.Nodes["a"] = n },
		"misfiled node":       func(m *Map) { m.Nodes["e"] = testNode("f") },
		"bad id":              func(m *Map) { m.Nodes["a b"] = testNode("a b") },
		"no raft addr":        func(m *Map) { n := m.Nodes["b"]; n.RaftAddr = ""; m.Nodes["b"] = n },
		"too many replicas":   func(m *Map) { m.Replicas = 1 },
		"leader hint outside": func(m *Map) { m.Leaders[0] = "old" },
		"short hints":         func(m *Map) { m.Leaders = m.Leaders[:2] },
	} {
		m := exampleMap()
		break_(m)
		if err := m.Validate(); !errors.Is(err, ErrInvalidMap) {
			t.Errorf("%s: Validate = %v, want ErrInvalidMap", name, err)
		}
		if _, err := m.MarshalBinary(); err == nil {
			t.Errorf("%s: MarshalBinary accepted an invalid map", name)
		}
	}
}

// FuzzDecodeMap: no input crashes the decoder, and whatever decodes is a
// valid map whose encoding is exactly the input (canonical form).
func FuzzDecodeMap(f *testing.F) {
	b, _ := exampleMap().MarshalBinary()
	f.Add(b)
	f.Add([]byte{mapVersion, 0, 1, 1, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMap(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrInvalidMap) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		again, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded map does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("not canonical:\n in %x\nout %x", b, again)
		}
	})
}

// TestValidateCallerInput: node ids and addresses a caller gives are
// checked against their rules, and an error quotes at most a short prefix
// of a hostile input.
func TestValidateCallerInput(t *testing.T) {
	huge := strings.Repeat("\x01", 4<<20)
	for _, tc := range []struct {
		id   NodeID
		want string // "" when valid
	}{
		{"node-1.a_b", ""},
		{"", "length 0 out of range 1..64"},
		{NodeID(strings.Repeat("a", 65)), "length 65 out of range 1..64"},
		{"a b", `byte " " at 1 not in [A-Za-z0-9._-]`},
		{"a\xff", `byte "\xff" at 1 not in [A-Za-z0-9._-]`},
		{NodeID(huge), "length 4194304 out of range 1..64"},
	} {
		checkCallerInput(t, "node id", len(tc.id), tc.id.Validate(), tc.want)
	}
	for _, tc := range []struct {
		addr, want string
	}{
		{"127.0.0.1:7421", ""},
		{"[::1]:7421", ""},
		{"node-1.grid.svc:7421", ""},
		{"", "length 0 out of range 1..255"},
		{"no-port", "want host:port"},
		{":7421", "want host:port"},
		{"a b:1", "want host:port"},
		{"\xff:1", "want host:port"},
		{"h:0", "port 1..65535"},
		{"h:65536", "port 1..65535"},
		{huge, "length 4194304 out of range 1..255"},
	} {
		checkCallerInput(t, "address", len(tc.addr), ValidateAddr(tc.addr), tc.want)
	}
}

func checkCallerInput(t *testing.T, what string, n int, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s of %d bytes: %v, want valid", what, n, err)
	case want == "":
	case err == nil:
		t.Errorf("%s of %d bytes accepted, want an error naming %q", what, n, want)
	case !strings.Contains(err.Error(), want) || len(err.Error()) > 512:
		t.Errorf("%s of %d bytes: %d-byte error %.300q, want one naming %q", what, n, len(err.Error()), err, want)
	}
}
