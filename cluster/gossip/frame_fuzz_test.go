package gossip

import (
	"bufio"
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// memberlistReads replays what memberlist v0.5.4 does with a stream
// message that passed checkStream, at the places where it trusts the wire:
// the makes sized by a header and the protocol versions it indexes. It
// panics where memberlist would.
func memberlistReads(t *testing.T, data []byte) {
	r := bufio.NewReader(bytes.NewReader(data))
	typ, _ := r.ReadByte()
	if typ == mlHasLabel {
		n, _ := r.ReadByte()
		r.Discard(int(n))
		typ, _ = r.ReadByte()
	}
	var body io.Reader = r
	if typ == mlCompress {
		var c mlCompressMsg
		if codec.NewDecoder(r, &codec.MsgpackHandle{}).Decode(&c) != nil {
			return
		}
		plain, err := inflate(c, maxGossipStream)
		if err != nil || len(plain) == 0 {
			t.Fatalf("accepted a compressed message that does not inflate: %v", err)
		}
		typ, body = plain[0], bytes.NewReader(plain[1:])
	}
	dec := codec.NewDecoder(body, &codec.MsgpackHandle{})
	switch typ {
	case mlPushPull:
		var h mlPushPullHeader
		if dec.Decode(&h) != nil {
			return
		}
		nodes := make([]mlPushNodeState, h.Nodes)
		for i := range nodes {
			if dec.Decode(&nodes[i]) != nil {
				return
			}
			if v := nodes[i].Vsn; len(v) > 0 {
				_ = v[0] + v[1] + v[2] + v[3] + v[4] + v[5]
			}
		}
		if h.UserStateLen > 0 {
			_ = make([]byte, h.UserStateLen)
		}
	case mlUser:
		var h mlUserMsgHeader
		if dec.Decode(&h) == nil && h.UserMsgLen > 0 {
			_ = make([]byte, h.UserMsgLen)
		}
	}
}

// FuzzCheckStream: checkStream never panics, reads no more than a
// stream's cap, and what it accepts memberlist can read without a panic.
func FuzzCheckStream(f *testing.F) {
	for _, msg := range attackStreams(f) {
		f.Add(msg)
	}
	node := mlPushNodeState{Name: "a", Addr: []byte{127, 0, 0, 1}, Port: 7422, Vsn: []uint8{1, 5, 2, 0, 0, 0}}
	pp := frame(f, mlPushPull, mlPushPullHeader{Nodes: 1, UserStateLen: 1}, node, []byte("x"))
	f.Add(pp)
	f.Add(compressed(f, pp))
	f.Add(frame(f, mlUser, mlUserMsgHeader{UserMsgLen: 1}, []byte("x")))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := &capReader{r: bytes.NewReader(data), left: maxGossipStream}
		if checkStream(rec) != nil || rec.over {
			return
		}
		memberlistReads(t, data)
	})
}

// FuzzCheckPacket: checkPacket never panics, and an alive message it lets
// through has no protocol version list memberlist would index past.
func FuzzCheckPacket(f *testing.F) {
	f.Add(frame(f, mlAlive, mlAliveMsg{Node: "a", Vsn: []uint8{1, 5, 2}}))
	f.Add(compressed(f, frame(f, mlAlive, mlAliveMsg{Node: "a", Vsn: []uint8{1, 5, 2, 0, 0, 0}})))
	f.Add([]byte{mlCompound, 1, 0, 1, mlAlive})
	f.Fuzz(func(t *testing.T, data []byte) {
		if checkPacket(data) != nil || len(data) == 0 || data[0] != mlAlive {
			return
		}
		var a mlAliveMsg
		if codec.NewDecoderBytes(data[1:], &codec.MsgpackHandle{}).Decode(&a) == nil {
			if v := a.Vsn; len(v) > 0 {
				_ = v[0] + v[1] + v[2] + v[3] + v[4] + v[5]
			}
		}
	})
}
