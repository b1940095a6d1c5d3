package raftlog

import (
	"encoding/binary"
	"math"
)

// The Store's key layout. All integers are big-endian, so that Pebble's
// bytewise order is numeric order:
//
//	log entry:    [0x01][group id: 8 bytes][log index: 8 bytes]  -> encoded raft.Log
//	stable value: [0x02][group id: 8 bytes][key bytes...]        -> raw value
//	store meta:   [0x00]"layout"                                 -> layout version (1 byte)
//
// Key kinds: the first byte of every key.
const (
	kindMeta   byte = 0x00
	kindLog    byte = 0x01
	kindStable byte = 0x02
)

const (
	groupPrefixLen = 1 + 8
	logKeyLen      = groupPrefixLen + 8
)

// layoutVersion is stored under metaLayoutKey. Bump it when the key layout or
// the value encoding changes incompatibly.
const layoutVersion byte = 1

var metaLayoutKey = []byte{kindMeta, 'l', 'a', 'y', 'o', 'u', 't'}

// appendGroupPrefix appends [kind][group id].
func appendGroupPrefix(dst []byte, kind byte, group uint64) []byte {
	dst = append(dst, kind)
	return binary.BigEndian.AppendUint64(dst, group)
}

// appendLogKey appends [kindLog][group id][index].
func appendLogKey(dst []byte, group, index uint64) []byte {
	dst = appendGroupPrefix(dst, kindLog, group)
	return binary.BigEndian.AppendUint64(dst, index)
}

// stableKey returns [kindStable][group id][key].
func stableKey(group uint64, key []byte) []byte {
	k := make([]byte, 0, groupPrefixLen+len(key))
	k = appendGroupPrefix(k, kindStable, group)
	return append(k, key...)
}

// groupBounds returns the half-open key range [lo, hi) holding every key of
// the given kind for group.
func groupBounds(kind byte, group uint64) (lo, hi []byte) {
	lo = appendGroupPrefix(make([]byte, 0, groupPrefixLen), kind, group)
	if group == math.MaxUint64 {
		// No group id follows; the end of this kind is the next kind's
		// one-byte key, which sorts before every key of that kind.
		return lo, []byte{kind + 1}
	}
	return lo, appendGroupPrefix(make([]byte, 0, groupPrefixLen), kind, group+1)
}

// logIndexFromKey extracts the index from a log key of group.
func logIndexFromKey(key []byte) (uint64, bool) {
	if len(key) != logKeyLen || key[0] != kindLog {
		return 0, false
	}
	return binary.BigEndian.Uint64(key[groupPrefixLen:]), true
}
