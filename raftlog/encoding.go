package raftlog

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"

	"github.com/hashicorp/raft"
)

// Log value encoding, version 1:
//
//	byte     version (logEncodingV1)
//	byte     type (raft.LogType)
//	byte     flags (bit 0: AppendedAt present; other bits must be zero)
//	uvarint  index
//	uvarint  term
//	uvarint  len(data), then data
//	uvarint  len(extensions), then extensions
//	if flags&flagAppendedAt:
//	  varint   AppendedAt Unix seconds
//	  uvarint  AppendedAt nanoseconds within the second (< 1e9)
//
// The encoding is canonical: varints must be minimal, unknown flag bits and
// trailing bytes are rejected, and a present AppendedAt must not be the zero
// time. So every byte string accepted by decodeLog re-encodes to itself,
// which FuzzDecodeLog checks. AppendedAt is decoded in UTC without a
// monotonic reading; only its instant is preserved.
const (
	logEncodingV1  byte = 1
	flagAppendedAt byte = 1 << 0
	knownFlags          = flagAppendedAt
)

// appendLog appends the encoding of l to dst.
func appendLog(dst []byte, l *raft.Log) []byte {
	var flags byte
	if !l.AppendedAt.IsZero() {
		flags |= flagAppendedAt
	}
	dst = append(dst, logEncodingV1, byte(l.Type), flags)
	dst = binary.AppendUvarint(dst, l.Index)
	dst = binary.AppendUvarint(dst, l.Term)
	dst = binary.AppendUvarint(dst, uint64(len(l.Data)))
	dst = append(dst, l.Data...)
	dst = binary.AppendUvarint(dst, uint64(len(l.Extensions)))
	dst = append(dst, l.Extensions...)
	if flags&flagAppendedAt != 0 {
		dst = binary.AppendVarint(dst, l.AppendedAt.Unix())
		dst = binary.AppendUvarint(dst, uint64(l.AppendedAt.Nanosecond()))
	}
	return dst
}

// decodeLog decodes src into l. Data and Extensions are copied, so src may be
// reused afterwards. On error l is left unchanged and the error wraps
// ErrCorrupt.
func decodeLog(src []byte, l *raft.Log) error {
	if len(src) < 3 {
		return fmt.Errorf("%w: log value of %d bytes is too short", ErrCorrupt, len(src))
	}
	if src[0] != logEncodingV1 {
		return fmt.Errorf("%w: unknown log encoding version %d", ErrCorrupt, src[0])
	}
	typ, flags := raft.LogType(src[1]), src[2]
	if flags&^knownFlags != 0 {
		return fmt.Errorf("%w: unknown log flags %#x", ErrCorrupt, flags)
	}
	b := src[3:]
	var index, term uint64
	var data, ext []byte
	var err error
	if index, b, err = readUvarint(b, "index"); err != nil {
		return err
	}
	if term, b, err = readUvarint(b, "term"); err != nil {
		return err
	}
	if data, b, err = readBytes(b, "data"); err != nil {
		return err
	}
	if ext, b, err = readBytes(b, "extensions"); err != nil {
		return err
	}
	var appendedAt time.Time
	if flags&flagAppendedAt != 0 {
		var sec int64
		var nsec uint64
		if sec, b, err = readVarint(b, "appended-at seconds"); err != nil {
			return err
		}
		if nsec, b, err = readUvarint(b, "appended-at nanoseconds"); err != nil {
			return err
		}
		if nsec >= uint64(time.Second) {
			return fmt.Errorf("%w: appended-at nanoseconds %d out of range", ErrCorrupt, nsec)
		}
		appendedAt = time.Unix(sec, int64(nsec)).UTC()
		if appendedAt.IsZero() {
			return fmt.Errorf("%w: appended-at flag set on zero time", ErrCorrupt)
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes after log", ErrCorrupt, len(b))
	}

	// One allocation holds both byte fields; empty fields stay nil.
	var buf []byte
	if n := len(data) + len(ext); n > 0 {
		buf = make([]byte, n)
		copy(buf, data)
		copy(buf[len(data):], ext)
	}
	*l = raft.Log{Index: index, Term: term, Type: typ, AppendedAt: appendedAt}
	if len(data) > 0 {
		l.Data = buf[:len(data):len(data)]
	}
	if len(ext) > 0 {
		l.Extensions = buf[len(data):]
	}
	return nil
}

// uvarintLen is the length of the minimal uvarint encoding of v.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// readUvarint reads a minimal uvarint, the field what.
func readUvarint(b []byte, what string) (uint64, []byte, error) {
	v, b, bad := uvarint(b)
	if bad != "" {
		return 0, nil, fmt.Errorf("%w: %s %s", ErrCorrupt, bad, what)
	}
	return v, b, nil
}

// uvarint reads a minimal uvarint. bad is empty, or says what is wrong
// with it in words that the field's name follows in the error. Its
// callers build the error, and the field's name, only when there is one:
// readBytes, on replay's path through every entry, once built its
// field's name at every call ("entry"+" length"), an allocation each.
func uvarint(b []byte) (v uint64, rest []byte, bad string) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, "truncated or overflowing"
	}
	if n != uvarintLen(v) {
		return 0, nil, "non-minimal encoding of"
	}
	return v, b[n:], ""
}

func readVarint(b []byte, what string) (int64, []byte, error) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: truncated or overflowing %s", ErrCorrupt, what)
	}
	ux := uint64(v) << 1 // zig-zag, as binary.AppendVarint does
	if v < 0 {
		ux = ^ux
	}
	if n != uvarintLen(ux) {
		return 0, nil, fmt.Errorf("%w: non-minimal encoding of %s", ErrCorrupt, what)
	}
	return v, b[n:], nil
}

// readBytes reads a uvarint length and that many bytes, without copying.
func readBytes(b []byte, what string) ([]byte, []byte, error) {
	n, b, bad := uvarint(b)
	if bad != "" {
		return nil, nil, fmt.Errorf("%w: %s %s length", ErrCorrupt, bad, what)
	}
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: %s length %d exceeds remaining %d bytes", ErrCorrupt, what, n, len(b))
	}
	return b[:n], b[n:], nil
}
