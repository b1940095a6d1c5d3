package topology

import (
	"testing"
)

// FuzzDecodeCommand: whatever decodes re-encodes to its input.
func FuzzDecodeCommand(f *testing.F) {
	w := newWorld(4, 3, "a", "b", "c")
	w.converge(f)
	for _, cmd := range []Command{
		{Type: CmdBootstrap, Map: w.m},
		{Type: CmdNodeJoin, Node: testNode("d")},
		{Type: CmdApplyMove, Move: Move{Shard: 0, Add: "d"}},
		{Type: CmdApplyMove, Move: Move{Shard: 0, Remove: "a", Leader: "d"}},
		{Type: CmdSetLeaderHint, Shard: 0, ID: "d"},
		{Type: CmdNodeDrain, ID: "c"},
		{Type: CmdNodeRemove, ID: "c"},
	} {
		b, err := cmd.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, err := DecodeCommand(b)
		if err != nil {
			return
		}
		again, err := cmd.MarshalBinary()
		if err != nil || string(again) != string(b) {
			t.Fatalf("decoded command does not re-encode to its input: %v", err)
		}
	})
}
