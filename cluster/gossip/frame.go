package gossip

import (
	"bufio"
	"bytes"
	"compress/lzw"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// ErrFrame: a gossip packet or stream message was refused before
// memberlist decoded it, because memberlist v0.5.4 would trust a length or
// a version list in it (see checkStream).
var ErrFrame = errors.New("gossip: frame refused")

// Wire limits of the frames memberlist exchanges. Our push/pull states are
// about 200 bytes a node and carry no user state; user messages are not
// used at all.
const (
	maxGossipStream  = 8 << 20 // bytes of one stream message, compressed or not
	maxGossipNodes   = 1 << 14 // node states in one push/pull
	maxGossipState   = 1 << 20 // user state bytes in one push/pull
	maxGossipUserMsg = 1 << 16 // bytes of one user message
	maxGossipDepth   = 4       // nesting of compound and compress in a packet
)

// memberlist v0.5.4's message types (net.go): the numbers are its protocol.
const (
	mlPing     = 0
	mlAck      = 2
	mlAlive    = 4
	mlPushPull = 6
	mlCompound = 7
	mlUser     = 8
	mlCompress = 9
	mlEncrypt  = 10
	mlHasCrc   = 12
	mlErr      = 13
	mlHasLabel = 244
)

// Mirrors of memberlist's wire structs, field for field, so they decode
// from the same msgpack (maps keyed by field name, or arrays in order).
type (
	mlPushPullHeader struct {
		Nodes        int
		UserStateLen int
		Join         bool
	}
	mlUserMsgHeader struct{ UserMsgLen int }
	mlPushNodeState struct {
		Name        string
		Addr        []byte
		Port        uint16
		Meta        []byte
		Incarnation uint32
		State       int
		Vsn         []uint8
	}
	mlAliveMsg struct {
		Incarnation uint32
		Node        string
		Addr        []byte
		Port        uint16
		Meta        []byte
		Vsn         []uint8
	}
	mlCompressMsg struct {
		Algo uint8
		Buf  []byte
	}
	mlPingMsg struct {
		SeqNo      uint32
		Node       string
		SourceAddr []byte
		SourcePort uint16
		SourceNode string
	}
	mlAckMsg struct {
		SeqNo   uint32
		Payload []byte
	}
	mlErrMsg struct{ Error string }
)

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFrame, fmt.Sprintf(format, args...))
}

// checkStream reads one stream message, as memberlist v0.5.4's readStream
// and the handlers after it would (an optional label header, then a plain
// or an lzw-compressed message), and refuses one that would make memberlist
// allocate by a length from the wire (a push/pull header's Nodes or
// UserStateLen, a user message's UserMsgLen: negative or huge), index past
// a short protocol version list (Vsn), or decompress without bound. An
// encrypted message is refused: this node does not configure encryption,
// so memberlist would refuse it too. A stream that ends before its first
// byte returns io.EOF; other read errors are returned as they are. r may
// read ahead: what it consumed is the caller's to replay.
func checkStream(r io.Reader) error { return checkStreamWith(r, nil) }

// checkStreamWith is checkStream with gossip encryption g (nil: off): an
// encrypted message is decrypted and checked, and a plaintext one refused
// when g verifies incoming gossip, as memberlist would.
func checkStreamWith(r io.Reader, g *cryptoGuard) error {
	br := bufio.NewReader(r)
	t, err := br.ReadByte()
	if err != nil {
		return err
	}
	var label []byte
	if t == mlHasLabel {
		n, err := br.ReadByte()
		if err != nil {
			return err
		}
		label = make([]byte, n)
		if _, err := io.ReadFull(br, label); err != nil {
			return err
		}
		if t, err = br.ReadByte(); err != nil {
			return err
		}
	}
	return checkStreamBody(t, br, label, g)
}

// checkStreamBody checks a stream message of type t whose label (if any)
// has been read.
func checkStreamBody(t byte, br *bufio.Reader, label []byte, g *cryptoGuard) error {
	switch {
	case t == mlEncrypt && g == nil:
		return refuse("encrypted stream message, and gossip encryption is off")
	case t == mlEncrypt:
		return g.checkEncryptedStream(br, label)
	case g != nil && g.verifyIncoming:
		return refuse("plaintext stream message, and gossip encryption verifies incoming messages")
	}
	switch t {
	case mlCompress:
		var c mlCompressMsg
		if err := codec.NewDecoder(br, &codec.MsgpackHandle{}).Decode(&c); err != nil {
			return err
		}
		plain, err := inflate(c, maxGossipStream)
		if err != nil {
			return err
		}
		if len(plain) == 0 {
			return refuse("empty compressed stream message")
		}
		return checkMessage(plain[0], bufio.NewReader(bytes.NewReader(plain[1:])))
	}
	return checkMessage(t, br)
}

// checkMessage checks the body of a stream message of type t.
func checkMessage(t byte, r *bufio.Reader) error {
	dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
	switch t {
	case mlPushPull:
		var h mlPushPullHeader
		if err := dec.Decode(&h); err != nil {
			return err
		}
		if h.Nodes < 0 || h.Nodes > maxGossipNodes {
			return refuse("push/pull of %d nodes", h.Nodes)
		}
		if h.UserStateLen < 0 || h.UserStateLen > maxGossipState {
			return refuse("push/pull with %d bytes of user state", h.UserStateLen)
		}
		for range h.Nodes {
			var s mlPushNodeState
			if err := dec.Decode(&s); err != nil {
				return err
			}
			if err := checkVsn(s.Name, s.Vsn); err != nil {
				return err
			}
		}
		_, err := r.Discard(h.UserStateLen)
		return err
	case mlUser:
		var h mlUserMsgHeader
		if err := dec.Decode(&h); err != nil {
			return err
		}
		if h.UserMsgLen < 0 || h.UserMsgLen > maxGossipUserMsg {
			return refuse("user message of %d bytes", h.UserMsgLen)
		}
		_, err := r.Discard(h.UserMsgLen)
		return err
	case mlPing:
		return dec.Decode(&mlPingMsg{})
	case mlAck:
		return dec.Decode(&mlAckMsg{})
	case mlErr:
		return dec.Decode(&mlErrMsg{})
	}
	return refuse("stream message of type %d", t)
}

// checkVsn refuses a protocol version list memberlist would index past:
// it reads six entries whenever the list is not empty.
func checkVsn(node string, vsn []uint8) error {
	if len(vsn) != 0 && len(vsn) < 6 {
		return refuse("node %q with %d protocol versions", node, len(vsn))
	}
	return nil
}

// inflate decompresses c as memberlist's decompressBuffer does, refusing
// more than limit bytes of output.
func inflate(c mlCompressMsg, limit int) ([]byte, error) {
	if c.Algo != 0 { // lzw, memberlist's only algorithm
		return nil, refuse("compression algorithm %d", c.Algo)
	}
	zr := lzw.NewReader(bytes.NewReader(c.Buf), lzw.LSB, 8)
	defer zr.Close()
	var b bytes.Buffer
	if _, err := io.CopyN(&b, zr, int64(limit)+1); err != nil && !errors.Is(err, io.EOF) {
		return nil, refuse("compressed message: %v", err)
	}
	if b.Len() > limit {
		return nil, refuse("compressed message inflates past %d bytes", limit)
	}
	return b.Bytes(), nil
}

// checkPacket checks a UDP packet as memberlist v0.5.4's ingestPacket and
// handleCommand would walk it (label header, checksum, compound and
// compressed messages), refusing an alive message with a short protocol
// version list, which memberlist would index past, and nesting deeper than
// maxGossipDepth. Anything else memberlist decodes from the packet's own
// bytes, within its length: it is left to memberlist.
func checkPacket(buf []byte) error {
	if len(buf) >= 2 && buf[0] == mlHasLabel {
		if len(buf) < 2+int(buf[1]) {
			return refuse("truncated label header")
		}
		buf = buf[2+int(buf[1]):]
	}
	if len(buf) >= 5 && buf[0] == mlHasCrc {
		buf = buf[5:]
	}
	return checkCommand(buf, 0)
}

func checkCommand(buf []byte, depth int) error {
	if len(buf) == 0 {
		return nil
	}
	if depth > maxGossipDepth {
		return refuse("packet nested deeper than %d", maxGossipDepth)
	}
	t, body := buf[0], buf[1:]
	switch t {
	case mlCompound:
		return checkCompound(body, depth)
	case mlCompress:
		var c mlCompressMsg
		if err := codec.NewDecoderBytes(body, &codec.MsgpackHandle{}).Decode(&c); err != nil {
			return nil // memberlist fails the same decode and drops it
		}
		plain, err := inflate(c, maxGossipStream)
		if err != nil {
			return err
		}
		return checkCommand(plain, depth+1)
	case mlAlive:
		var a mlAliveMsg
		if err := codec.NewDecoderBytes(body, &codec.MsgpackHandle{}).Decode(&a); err != nil {
			return nil
		}
		return checkVsn(a.Node, a.Vsn)
	}
	return nil
}

// checkCompound splits a compound message as memberlist's
// decodeCompoundMessage does and checks each part.
func checkCompound(body []byte, depth int) error {
	if len(body) < 1 {
		return nil
	}
	n := int(body[0])
	body = body[1:]
	if len(body) < 2*n {
		return nil
	}
	lens := body[:2*n]
	body = body[2*n:]
	for i := range n {
		l := int(lens[2*i])<<8 | int(lens[2*i+1])
		if len(body) < l {
			return nil // memberlist handles the parts before, drops the rest
		}
		if err := checkCommand(body[:l], depth+1); err != nil {
			return err
		}
		body = body[l:]
	}
	return nil
}
