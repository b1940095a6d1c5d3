package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A journal segment is a sequence of records, each
//
//	uint32  CRC-32C of everything after this field (length, type, payload)
//	uint32  payload length
//	byte    record type
//	...     payload
//
// (integers little-endian), followed by zeros up to the end of the
// preallocated file. An all-zero header ends a segment's records: no real
// record has type 0.
const (
	recHeaderLen = 4 + 4 + 1

	// maxRecordLen bounds a record's payload, so a corrupt length is caught
	// before it sizes an allocation. Raft's entries are far smaller (the
	// grid's largest is a batch of 1000 keys).
	maxRecordLen = 256 << 20
)

// Record types.
const (
	// recSegment opens every segment: journalMagic, journalVersion and the
	// segment's id, so a renamed or foreign file is not replayed.
	recSegment byte = 1
	// recEntries: uvarint group, then for each entry a uvarint length and
	// the entry in the log encoding (encoding.go). Appending index i to a
	// group that holds [first, last] drops the entries from i on first (a
	// conflicting suffix, or the same entries copied forward), or all of
	// them when i lies outside [first, last+1].
	recEntries byte = 2
	// recStable: uvarint group, uvarint key length, key, then the value.
	recStable byte = 3
	// recDeleteRange: uvarint group, uvarint min, uvarint max (inclusive).
	recDeleteRange byte = 4
	// recDeleteGroup: uvarint group; its entries and stable keys go.
	recDeleteGroup byte = 5
)

var journalMagic = [4]byte{'L', '4', 'X', 'J'}

// journalVersion is the format written in every segment's first record.
// Bump it when the format changes incompatibly.
const journalVersion byte = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errEndOfRecords reports an all-zero header: the end of a segment's
// records.
var errEndOfRecords = errors.New("raftlog: end of records")

// beginRecord appends a record header with a zero length and CRC to dst and
// returns dst and the header's offset, for finishRecord once the payload
// is appended.
func beginRecord(dst []byte, typ byte) ([]byte, int) {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, typ)
	return dst, at
}

// finishRecord fills in the length and CRC of the record that begins at
// dst[at].
func finishRecord(dst []byte, at int) []byte {
	binary.LittleEndian.PutUint32(dst[at+4:], uint32(len(dst)-at-recHeaderLen))
	binary.LittleEndian.PutUint32(dst[at:], crc32.Checksum(dst[at+4:], castagnoli))
	return dst
}

// readRecord reads the record at the start of b. It returns errEndOfRecords
// for an all-zero header (or fewer bytes than a header, all zero), and an
// error wrapping ErrCorrupt for a truncated record, a length beyond
// maxRecordLen, a CRC mismatch or an unknown type. n is the record's size
// with its header.
func readRecord(b []byte) (typ byte, payload []byte, n int, err error) {
	if len(b) < recHeaderLen {
		if allZero(b) {
			return 0, nil, 0, errEndOfRecords
		}
		return 0, nil, 0, fmt.Errorf("%w: %d bytes are too short for a record header", ErrCorrupt, len(b))
	}
	sum := binary.LittleEndian.Uint32(b)
	length := binary.LittleEndian.Uint32(b[4:])
	typ = b[8]
	if sum == 0 && length == 0 && typ == 0 {
		return 0, nil, 0, errEndOfRecords
	}
	if length > maxRecordLen {
		return 0, nil, 0, fmt.Errorf("%w: record length %d is over the limit of %d", ErrCorrupt, length, maxRecordLen)
	}
	n = recHeaderLen + int(length)
	if n > len(b) {
		return 0, nil, 0, fmt.Errorf("%w: record of %d bytes runs past the end (%d bytes left)", ErrCorrupt, n, len(b))
	}
	if got := crc32.Checksum(b[4:n], castagnoli); got != sum {
		return 0, nil, 0, fmt.Errorf("%w: record checksum %08x, want %08x", ErrCorrupt, got, sum)
	}
	if typ < recSegment || typ > recDeleteGroup {
		return 0, nil, 0, fmt.Errorf("%w: unknown record type %d", ErrCorrupt, typ)
	}
	return typ, b[recHeaderLen:n], n, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// appendSegmentRecord appends a segment's opening record.
func appendSegmentRecord(dst []byte, id uint64) []byte {
	dst, at := beginRecord(dst, recSegment)
	dst = append(dst, journalMagic[:]...)
	dst = append(dst, journalVersion)
	dst = binary.LittleEndian.AppendUint64(dst, id)
	return finishRecord(dst, at)
}

// parseSegmentRecord checks a segment's opening record's payload and
// returns the id it names.
func parseSegmentRecord(p []byte) (uint64, error) {
	if len(p) != len(journalMagic)+1+8 || [4]byte(p[:4]) != journalMagic {
		return 0, fmt.Errorf("%w: not a journal segment", ErrCorrupt)
	}
	if p[4] != journalVersion {
		return 0, fmt.Errorf("%w: journal format %d, this build reads %d", ErrIncompatibleLayout, p[4], journalVersion)
	}
	return binary.LittleEndian.Uint64(p[5:]), nil
}

// appendStableRecord appends a record that sets group's key to val.
func appendStableRecord(dst []byte, group uint64, key, val []byte) []byte {
	dst, at := beginRecord(dst, recStable)
	dst = binary.AppendUvarint(dst, group)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = append(dst, val...)
	return finishRecord(dst, at)
}

// appendDeleteRangeRecord appends a record deleting group's entries
// min..max.
func appendDeleteRangeRecord(dst []byte, group, lo, hi uint64) []byte {
	dst, at := beginRecord(dst, recDeleteRange)
	dst = binary.AppendUvarint(dst, group)
	dst = binary.AppendUvarint(dst, lo)
	dst = binary.AppendUvarint(dst, hi)
	return finishRecord(dst, at)
}

// appendDeleteGroupRecord appends a record deleting group.
func appendDeleteGroupRecord(dst []byte, group uint64) []byte {
	dst, at := beginRecord(dst, recDeleteGroup)
	dst = binary.AppendUvarint(dst, group)
	return finishRecord(dst, at)
}

// journalOp is one decoded record's effect on the index. For recEntries,
// entries holds each entry's index and its encoded bytes' place in the
// record's payload.
type journalOp struct {
	typ      byte
	group    uint64
	key, val []byte // recStable
	lo, hi   uint64 // recDeleteRange
	entries  []opEntry
}

type opEntry struct {
	index uint64
	off   int // of the encoded entry, in the payload
	n     int
}

// parseOp decodes a record payload (not recSegment) into op, reusing its
// entries slice. Every length is checked against the payload; the entries
// themselves are checked only as far as their index, which is what the
// index needs: GetLog decodes them in full.
func parseOp(typ byte, p []byte, op *journalOp) error {
	*op = journalOp{typ: typ, entries: op.entries[:0]}
	b := p
	var err error
	if op.group, b, err = readUvarint(b, "group"); err != nil {
		return err
	}
	switch typ {
	case recEntries:
		for len(b) > 0 {
			var e []byte
			if e, b, err = readBytes(b, "entry"); err != nil {
				return err
			}
			idx, err := encodedLogIndex(e)
			if err != nil {
				return err
			}
			if idx == 0 {
				return fmt.Errorf("%w: entry with index 0", ErrCorrupt)
			}
			if k := len(op.entries); k > 0 && (idx != op.entries[k-1].index+1 || idx == 0) {
				return fmt.Errorf("%w: entry %d follows entry %d in one record", ErrCorrupt, idx, op.entries[k-1].index)
			}
			op.entries = append(op.entries, opEntry{index: idx, off: len(p) - len(b) - len(e), n: len(e)})
		}
		if len(op.entries) == 0 {
			return fmt.Errorf("%w: entries record without entries", ErrCorrupt)
		}
	case recStable:
		if op.key, b, err = readBytes(b, "stable key"); err != nil {
			return err
		}
		op.val = b
	case recDeleteRange:
		if op.lo, b, err = readUvarint(b, "range start"); err != nil {
			return err
		}
		if op.hi, b, err = readUvarint(b, "range end"); err != nil {
			return err
		}
		if len(b) != 0 {
			return fmt.Errorf("%w: %d trailing bytes in a delete record", ErrCorrupt, len(b))
		}
	case recDeleteGroup:
		if len(b) != 0 {
			return fmt.Errorf("%w: %d trailing bytes in a delete record", ErrCorrupt, len(b))
		}
	default:
		return fmt.Errorf("%w: record type %d out of place", ErrCorrupt, typ)
	}
	return nil
}

// encodedLogIndex reads the index of an entry in the log encoding without
// decoding the rest.
func encodedLogIndex(e []byte) (uint64, error) {
	if len(e) < 3 || e[0] != logEncodingV1 {
		return 0, fmt.Errorf("%w: malformed entry of %d bytes", ErrCorrupt, len(e))
	}
	idx, _, err := readUvarint(e[3:], "index")
	return idx, err
}
