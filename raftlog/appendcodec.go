package raftlog

import (
	"encoding/binary"
	"fmt"

	"github.com/hashicorp/raft"
)

// The frames of an append stream (appendstream.go). Both directions carry
// frames of one shape:
//
//	uint32   length of the rest of the frame, big-endian (<= maxAppendFrame)
//	byte     kind: frameAppendRequest or frameAppendResponse
//	uvarint  call id, chosen by the caller, echoed by the answer
//	uvarint  group id (requests only)
//	...      the body
//
// A request's body is an AppendEntriesRequest:
//
//	uvarint  protocol version
//	bytes    header ID, header Addr, Leader (uvarint length, then the bytes)
//	uvarint  term, previous log index, previous log term, leader commit index
//	uvarint  n, then n times: bytes (the entry in the log encoding of encoding.go)
//
// An answer's body is the error the follower's Raft gave (bytes; empty: none)
// and an AppendEntriesResponse:
//
//	uvarint  protocol version
//	bytes    header ID, header Addr
//	uvarint  term, last log index
//	byte     flags (bit 0 Success, bit 1 NoRetryBackoff; other bits zero)
//
// Like the log encoding, it is canonical (minimal varints, no unknown flags,
// no trailing bytes), so every frame accepted re-encodes to itself, which
// FuzzAppendFrame checks.
const (
	frameAppendRequest  byte = 1
	frameAppendResponse byte = 2

	frameLenSize = 4
	// maxAppendFrame bounds a frame's length: a length over it is a
	// corrupt stream, which closes the connection instead of allocating.
	maxAppendFrame = 16 << 20
	// maxStreamedAppend is the largest AppendEntries (appendRequestBound)
	// sent on the stream; a larger one (a catch-up of many large entries)
	// goes over NetworkTransport, so that no frame holds the stream's
	// heartbeats back for long. A steady entry is far smaller.
	maxStreamedAppend = 1 << 20
	// maxFrameEntries is raft's largest MaxAppendEntries.
	maxFrameEntries = 1024

	respSuccess        byte = 1 << 0
	respNoRetryBackoff byte = 1 << 1
	respKnownFlags          = respSuccess | respNoRetryBackoff
)

// appendFrame is one decoded frame. For a request, req is set; for an
// answer, resp and errMsg.
type appendFrame struct {
	kind   byte
	call   uint64
	group  uint64
	req    *raft.AppendEntriesRequest
	resp   *raft.AppendEntriesResponse
	errMsg string
}

// appendBytes appends a uvarint length and b.
func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// beginFrame appends a frame's length placeholder, kind and call id; the
// caller appends the rest and calls endFrame with the frame's start.
func beginFrame(dst []byte, kind byte, call uint64) []byte {
	dst = append(dst, 0, 0, 0, 0, kind)
	return binary.AppendUvarint(dst, call)
}

// endFrame writes the length of the frame that starts at start.
func endFrame(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-frameLenSize))
	return dst
}

// appendRequestFrame appends the frame of call id's AppendEntries for group.
func appendRequestFrame(dst []byte, call, group uint64, r *raft.AppendEntriesRequest) []byte {
	start := len(dst)
	dst = beginFrame(dst, frameAppendRequest, call)
	dst = binary.AppendUvarint(dst, group)
	dst = appendRPCHeader(dst, r.RPCHeader)
	dst = appendBytes(dst, r.Leader)
	dst = binary.AppendUvarint(dst, r.Term)
	dst = binary.AppendUvarint(dst, r.PrevLogEntry)
	dst = binary.AppendUvarint(dst, r.PrevLogTerm)
	dst = binary.AppendUvarint(dst, r.LeaderCommitIndex)
	dst = binary.AppendUvarint(dst, uint64(len(r.Entries)))
	for _, e := range r.Entries {
		// The entry's length goes before it: encode it in place, then
		// move it right by the length's size (one memmove, no buffer).
		at := len(dst)
		dst = appendLog(dst, e)
		n := len(dst) - at
		var lenBuf [binary.MaxVarintLen64]byte
		ln := binary.PutUvarint(lenBuf[:], uint64(n))
		dst = append(dst, lenBuf[:ln]...)
		copy(dst[at+ln:], dst[at:at+n])
		copy(dst[at:], lenBuf[:ln])
	}
	return endFrame(dst, start)
}

// appendRequestBound is at least the length of r's frame: each varint
// takes at most 10 bytes, and an entry's encoding at most 3 + 6 varints
// more than its data and extensions.
func appendRequestBound(r *raft.AppendEntriesRequest) int {
	n := frameLenSize + 1 + 11*binary.MaxVarintLen64 + len(r.ID) + len(r.Addr) + len(r.Leader)
	for _, e := range r.Entries {
		n += 3 + 7*binary.MaxVarintLen64 + len(e.Data) + len(e.Extensions)
	}
	return n
}

// appendResponseFrame appends the answer to call: the follower's error
// (nil: none) and its response.
func appendResponseFrame(dst []byte, call uint64, errMsg string, r *raft.AppendEntriesResponse) []byte {
	start := len(dst)
	dst = beginFrame(dst, frameAppendResponse, call)
	dst = binary.AppendUvarint(dst, uint64(len(errMsg)))
	dst = append(dst, errMsg...)
	dst = appendRPCHeader(dst, r.RPCHeader)
	dst = binary.AppendUvarint(dst, r.Term)
	dst = binary.AppendUvarint(dst, r.LastLog)
	var flags byte
	if r.Success {
		flags |= respSuccess
	}
	if r.NoRetryBackoff {
		flags |= respNoRetryBackoff
	}
	dst = append(dst, flags)
	return endFrame(dst, start)
}

// decodeAppendFrame decodes a frame's body: the bytes after its length.
// Byte fields and entries are copied out of b, so b may be reused. Errors
// wrap ErrCorrupt.
func decodeAppendFrame(b []byte) (appendFrame, error) {
	var f appendFrame
	var err error
	if len(b) == 0 {
		return f, fmt.Errorf("%w: empty append frame", ErrCorrupt)
	}
	f.kind, b = b[0], b[1:]
	if f.call, b, err = readUvarint(b, "call id"); err != nil {
		return f, err
	}
	switch f.kind {
	case frameAppendRequest:
		if f.group, b, err = readUvarint(b, "group"); err != nil {
			return f, err
		}
		f.req, b, err = decodeAppendRequest(b)
	case frameAppendResponse:
		var msg []byte
		if msg, b, err = readBytes(b, "error"); err != nil {
			return f, err
		}
		f.errMsg = string(msg)
		f.resp, b, err = decodeAppendResponse(b)
	default:
		return f, fmt.Errorf("%w: unknown append frame kind %d", ErrCorrupt, f.kind)
	}
	if err != nil {
		return f, err
	}
	if len(b) != 0 {
		return f, fmt.Errorf("%w: %d trailing bytes after append frame", ErrCorrupt, len(b))
	}
	return f, nil
}

// appendRPCHeader appends the RPC header both directions carry: the
// protocol version, then the ID and Addr bytes.
func appendRPCHeader(dst []byte, h raft.RPCHeader) []byte {
	dst = binary.AppendUvarint(dst, uint64(h.ProtocolVersion))
	dst = appendBytes(dst, h.ID)
	return appendBytes(dst, h.Addr)
}

// readRPCHeader reads what appendRPCHeader wrote, copying its bytes.
func readRPCHeader(b []byte) (raft.RPCHeader, []byte, error) {
	var h raft.RPCHeader
	v, b, err := readUvarint(b, "protocol version")
	if err != nil {
		return h, nil, err
	}
	var id, addr []byte
	if id, b, err = readBytes(b, "id"); err != nil {
		return h, nil, err
	}
	if addr, b, err = readBytes(b, "addr"); err != nil {
		return h, nil, err
	}
	h.ProtocolVersion, h.ID, h.Addr = raft.ProtocolVersion(v), cloneBytes(id), cloneBytes(addr)
	return h, b, nil
}

// cloneBytes copies b; empty stays nil, as msgpack decodes it.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

func decodeAppendRequest(b []byte) (*raft.AppendEntriesRequest, []byte, error) {
	r := new(raft.AppendEntriesRequest)
	var leader []byte
	var err error
	if r.RPCHeader, b, err = readRPCHeader(b); err != nil {
		return nil, nil, err
	}
	if leader, b, err = readBytes(b, "leader"); err != nil {
		return nil, nil, err
	}
	r.Leader = cloneBytes(leader)
	for _, p := range []*uint64{&r.Term, &r.PrevLogEntry, &r.PrevLogTerm, &r.LeaderCommitIndex} {
		if *p, b, err = readUvarint(b, "append entries field"); err != nil {
			return nil, nil, err
		}
	}
	var n uint64
	if n, b, err = readUvarint(b, "entry count"); err != nil {
		return nil, nil, err
	}
	// Each entry takes at least 8 bytes (its length, 3 header bytes and 4
	// one-byte varints), so a count the frame cannot hold is refused
	// before anything is allocated.
	if n > maxFrameEntries || n > uint64(len(b))/8 {
		return nil, nil, fmt.Errorf("%w: %d entries in %d bytes", ErrCorrupt, n, len(b))
	}
	if n > 0 {
		// Each entry on its own: raft's log cache keeps some of them, and
		// one array would keep every entry of the request alive with them.
		r.Entries = make([]*raft.Log, n)
		for i := range r.Entries {
			var enc []byte
			if enc, b, err = readBytes(b, "entry"); err != nil {
				return nil, nil, err
			}
			l := new(raft.Log)
			if err := decodeLog(enc, l); err != nil {
				return nil, nil, err
			}
			r.Entries[i] = l
		}
	}
	return r, b, nil
}

func decodeAppendResponse(b []byte) (*raft.AppendEntriesResponse, []byte, error) {
	r := new(raft.AppendEntriesResponse)
	var err error
	if r.RPCHeader, b, err = readRPCHeader(b); err != nil {
		return nil, nil, err
	}
	if r.Term, b, err = readUvarint(b, "term"); err != nil {
		return nil, nil, err
	}
	if r.LastLog, b, err = readUvarint(b, "last log"); err != nil {
		return nil, nil, err
	}
	if len(b) == 0 {
		return nil, nil, fmt.Errorf("%w: append response without flags", ErrCorrupt)
	}
	flags := b[0]
	if flags&^respKnownFlags != 0 {
		return nil, nil, fmt.Errorf("%w: unknown append response flags %#x", ErrCorrupt, flags)
	}
	r.Success, r.NoRetryBackoff = flags&respSuccess != 0, flags&respNoRetryBackoff != 0
	return r, b[1:], nil
}
