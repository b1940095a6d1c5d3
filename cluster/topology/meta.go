package topology

import (
	"encoding/binary"
	"fmt"
)

// MaxMetaSize is the most metadata a node can gossip: memberlist.MetaMaxSize,
// which the cluster runtime checks it equals (TestMaxMetaSizeIsMemberlists).
const MaxMetaSize = 512

// NodeMeta is what a node gossips about itself as memberlist node metadata:
// its id and the addresses other nodes and clients reach it on. Gossip only
// informs; a node enters the cluster map through the control group.
//
// Incarnation is the random id of the node's data directory, made at its
// first start and kept there (never 0 from this binary; 0 from a node of
// version 1): a node that comes back under its old id with a wiped
// directory gossips a new one, which is how the control leader tells it
// from the node it removed.
type NodeMeta struct {
	ID          NodeID
	GRPCAddr    string
	RaftAddr    string
	HTTPAddr    string
	Incarnation uint64
}

// metaVersion 3: version byte, flags byte, then ID, GRPCAddr, RaftAddr,
// HTTPAddr as uvarint-length-prefixed strings, then (from version 2) the
// incarnation as a uvarint. Flag MetaLeaving marks a node that is leaving
// on purpose: memberlist reports a departure without saying whether the
// node left or died, so Leave gossips this flag first. Flag MetaDiskFull
// (from version 3) marks a node whose data directory has less room than
// its disk reserve: it takes no new keys, so no shard leadership should
// go to it. A later version may only append fields and flags: a reader
// takes the fields it knows from any version >= 1 and ignores the flags
// and fields it does not know from a newer version, so mixed-version
// clusters keep gossiping during an upgrade.
const (
	metaVersion  = 3
	MetaLeaving  = 1 << 0
	MetaDiskFull = 1 << 1
)

// metaFlags are the flags a node of version v may set.
func metaFlags(v byte) byte {
	if v >= 3 {
		return MetaLeaving | MetaDiskFull
	}
	return MetaLeaving
}

// MarshalBinary encodes m; it fails if the encoding exceeds memberlist's
// metadata limit (512 bytes).
func (m NodeMeta) MarshalBinary() ([]byte, error) { return m.Encode(0) }

func (m NodeMeta) Encode(flags byte) ([]byte, error) {
	for _, s := range [...]string{string(m.ID), m.GRPCAddr, m.RaftAddr, m.HTTPAddr} {
		if len(s) > maxString {
			return nil, fmt.Errorf("%w: field longer than %d bytes", ErrMeta, maxString)
		}
	}
	b := []byte{metaVersion, flags}
	b = appendString(b, string(m.ID))
	b = appendString(b, m.GRPCAddr)
	b = appendString(b, m.RaftAddr)
	b = appendString(b, m.HTTPAddr)
	b = binary.AppendUvarint(b, m.Incarnation)
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrMeta, len(b), MaxMetaSize)
	}
	return b, nil
}

// DecodeNodeMeta decodes gossiped metadata. The bytes come from the
// network: any input returns an error wrapping ErrMeta rather than crash.
func DecodeNodeMeta(b []byte) (NodeMeta, error) {
	m, _, err := DecodeMeta(b)
	return m, err
}

func DecodeMeta(b []byte) (NodeMeta, byte, error) {
	if len(b) > MaxMetaSize {
		return NodeMeta{}, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrMeta, len(b), MaxMetaSize)
	}
	r := &reader{b: b}
	v := r.byte()
	if r.err == nil && v < 1 {
		r.fail("metadata version %d", v)
	}
	flags := r.byte()
	if v <= metaVersion && flags&^metaFlags(v) != 0 {
		r.fail("unknown metadata flags %#x", flags)
	}
	m := NodeMeta{ID: NodeID(r.string()), GRPCAddr: r.string(), RaftAddr: r.string(), HTTPAddr: r.string()}
	if v >= 2 {
		m.Incarnation = r.uvarint(^uint64(0))
	}
	if v <= metaVersion {
		r.done()
	}
	if r.err == nil {
		if err := m.ID.Validate(); err != nil {
			r.err = err
		}
	}
	if r.err != nil {
		return NodeMeta{}, 0, fmt.Errorf("%w: %w", ErrMeta, r.err)
	}
	return m, flags, nil
}
