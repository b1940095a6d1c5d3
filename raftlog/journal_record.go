package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A journal segment is a sequence of frames, one per write (one write and
// one fdatasync), followed by zeros up to the end of the preallocated file:
//
//	4 bytes  frameMagic
//	uint32   CRC-32C of the segment's id and the next 16 bytes
//	uint32   body length
//	uint64   sequence number: one more than the frame before, across segments
//	uint32   CRC-32C of the body
//	...      body: records
//	4 bytes  frameEnd
//
// A record is
//
//	uint32  CRC-32C of everything after this field (length, type, payload)
//	uint32  payload length
//	byte    record type
//	...     payload
//
// (integers little-endian). An all-zero frame header ends a segment's
// frames. A frame begins and ends with bytes that are never zero, so that
// every 512-byte sector it touches holds some of its bytes that are not
// zero unless its payload has a whole sector of zeros: a sector that reads
// as zeros was not written (see tornShape). Format 1 had no frames: its
// segments hold records directly, an all-zero record header ending them;
// this build reads both and writes 2.
const (
	frameHeaderLen  = 4 + 4 + 4 + 8 + 4
	frameTrailerLen = 4
	recHeaderLen    = 4 + 4 + 1

	// sectorSize is the unit a disk writes whole or not at all.
	sectorSize = 512

	// maxRecordLen bounds a record's payload, so a corrupt length is caught
	// before it sizes an allocation. Raft's entries are far smaller (the
	// grid's largest is a batch of 1000 keys).
	maxRecordLen = 256 << 20
)

var (
	frameMagic = [4]byte{'L', '4', 'X', 'F'}
	frameEnd   = [frameTrailerLen]byte{'F', 'X', '4', 'L'}
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
// Bump it when the format changes incompatibly. Segments of
// journalVersionRecords, the format before frames, are still read.
const (
	journalVersion        byte = 2
	journalVersionRecords byte = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errEndOfRecords reports an all-zero header: the end of a segment's
// records.
var errEndOfRecords = errors.New("raftlog: end of records")

// frameHeader is a decoded frame header.
type frameHeader struct {
	seq     uint64
	bodyLen int
	bodySum uint32
}

// frameLen is the size of the frame with header h.
func (h frameHeader) frameLen() int { return frameHeaderLen + h.bodyLen + frameTrailerLen }

// finishFrame fills in the header of the frame whose header room and body
// frame holds, as frame number seq of segment seg, and appends its
// trailer.
func finishFrame(frame []byte, seg, seq uint64) []byte {
	h := frame[:frameHeaderLen]
	copy(h, frameMagic[:])
	binary.LittleEndian.PutUint32(h[8:], uint32(len(frame)-frameHeaderLen))
	binary.LittleEndian.PutUint64(h[12:], seq)
	binary.LittleEndian.PutUint32(h[20:], crc32.Checksum(frame[frameHeaderLen:], castagnoli))
	binary.LittleEndian.PutUint32(h[4:], frameHeaderSum(h, seg))
	return append(frame, frameEnd[:]...)
}

// frameHeaderSum is the checksum of header h in segment seg: a frame is
// valid only in the segment it was written to.
func frameHeaderSum(h []byte, seg uint64) uint32 {
	var id [8]byte
	binary.LittleEndian.PutUint64(id[:], seg)
	return crc32.Update(crc32.Checksum(id[:], castagnoli), castagnoli, h[8:frameHeaderLen])
}

// readFrameHeader decodes the frame header at the start of b, in segment
// seg. ok is false unless b starts with a whole header whose magic and
// checksum hold; the frame may still run past the end of b.
func readFrameHeader(b []byte, seg uint64) (h frameHeader, ok bool) {
	if len(b) < frameHeaderLen || [4]byte(b[:4]) != frameMagic || binary.LittleEndian.Uint32(b[4:]) != frameHeaderSum(b, seg) {
		return h, false
	}
	return frameHeader{
		bodyLen: int(binary.LittleEndian.Uint32(b[8:])),
		seq:     binary.LittleEndian.Uint64(b[12:]),
		bodySum: binary.LittleEndian.Uint32(b[20:]),
	}, true
}

// validFrame reports whether b starts with a whole, valid frame of segment
// seg, and returns its header.
func validFrame(b []byte, seg uint64) (frameHeader, bool) {
	h, ok := readFrameHeader(b, seg)
	if !ok || h.frameLen() > len(b) {
		return h, false
	}
	end := frameHeaderLen + h.bodyLen
	return h, crc32.Checksum(b[frameHeaderLen:end], castagnoli) == h.bodySum && [frameTrailerLen]byte(b[end:]) == frameEnd
}

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

// allZero reports whether every byte of b is zero: the first is, and each
// of the others equals the one before it. Comparing b with itself shifted
// by one byte runs at bytes.Equal's speed without a block of zeros to
// compare against; such a block, on the stack, cost a 4 KiB clear per
// call, and replay calls allZero at every frame.
func allZero(b []byte) bool {
	return len(b) == 0 || b[0] == 0 && bytes.Equal(b[1:], b[:len(b)-1])
}

// zeroBlock is how many bytes nonZeroLen checks at once: a segment's tail
// is checked block by block from its end, not byte by byte, since opening
// a journal checks up to a whole segment of zeros.
const zeroBlock = 4 << 10

// appendSegmentRecord appends a segment's opening record.
func appendSegmentRecord(dst []byte, id uint64) []byte {
	return appendSegmentRecordOf(dst, id, journalVersion)
}

func appendSegmentRecordOf(dst []byte, id uint64, version byte) []byte {
	dst, at := beginRecord(dst, recSegment)
	dst = append(dst, journalMagic[:]...)
	dst = append(dst, version)
	dst = binary.LittleEndian.AppendUint64(dst, id)
	return finishRecord(dst, at)
}

// parseSegmentRecord checks a segment's opening record's payload and
// returns the id it names and its format.
func parseSegmentRecord(p []byte) (id uint64, version byte, err error) {
	if len(p) != len(journalMagic)+1+8 || [4]byte(p[:4]) != journalMagic {
		return 0, 0, fmt.Errorf("%w: not a journal segment", ErrCorrupt)
	}
	if v := p[4]; v != journalVersion && v != journalVersionRecords {
		return 0, 0, fmt.Errorf("%w: journal format %d, this build reads %d and %d", ErrIncompatibleLayout, v, journalVersionRecords, journalVersion)
	}
	return binary.LittleEndian.Uint64(p[5:]), p[4], nil
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
