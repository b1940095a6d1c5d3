package raftlog

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

// Mux connection header, written by the dialer before anything else:
//
//	4 bytes  magic "L4XM"
//	byte     version: muxVersion1 or muxVersionAppend
//	8 bytes  group id, big-endian (zero for muxVersionAppend)
//	byte     n = length of the dialer's advertised address (1..255)
//	n bytes  the dialer's advertised address, "host:port"
//
// The accepting side reads exactly these bytes (no read-ahead). What
// follows a version 1 header is the Raft stream of one group's
// NetworkTransport; what follows a muxVersionAppend header is the node
// pair's append stream (appendstream.go), which carries the AppendEntries
// of every group. A build older than the append stream refuses version 2
// as an unknown version, which is how a dialer learns to fall back.
// readHeader accepts only what appendHeader produces: every accepted header
// re-encodes to the bytes it was read from (FuzzReadHeader).
const (
	muxVersion1      byte = 1
	muxVersionAppend byte = 2
	headerFixedLen        = 4 + 1 + 8 + 1
	maxAddrLen            = 255
	// MaxHeaderLen is the largest connection header, in bytes.
	MaxHeaderLen = headerFixedLen + maxAddrLen
)

var muxMagic = [4]byte{'L', '4', 'X', 'M'}

// header is the decoded connection header.
type header struct {
	append bool // an append stream (muxVersionAppend), not a group's stream
	group  uint64
	addr   string // the dialer's advertised address
}

// checkAddr reports whether addr can go into a header: 1..255 bytes of
// printable ASCII that split into host and port.
func checkAddr(addr string) error {
	if len(addr) == 0 || len(addr) > maxAddrLen {
		return fmt.Errorf("address of %d bytes, want 1..%d", len(addr), maxAddrLen)
	}
	for i := 0; i < len(addr); i++ {
		if addr[i] < 0x21 || addr[i] > 0x7e {
			return fmt.Errorf("address %q has a byte outside printable ASCII", addr)
		}
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	return nil
}

// appendHeader appends the encoding of h to dst. h.addr must pass checkAddr.
func appendHeader(dst []byte, h header) []byte {
	dst = append(dst, muxMagic[:]...)
	version := muxVersion1
	if h.append {
		version = muxVersionAppend
	}
	dst = append(dst, version)
	dst = binary.BigEndian.AppendUint64(dst, h.group)
	dst = append(dst, byte(len(h.addr)))
	return append(dst, h.addr...)
}

// readHeader reads one header from r, reading no byte past it. Every error
// wraps ErrBadHeader (and the I/O error, if there was one).
func readHeader(r io.Reader) (header, error) {
	var fixed [headerFixedLen]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return header{}, fmt.Errorf("%w: %w", ErrBadHeader, err)
	}
	if [4]byte(fixed[:4]) != muxMagic {
		return header{}, fmt.Errorf("%w: bad magic %x", ErrBadHeader, fixed[:4])
	}
	h := header{append: fixed[4] == muxVersionAppend, group: binary.BigEndian.Uint64(fixed[5:13])}
	switch {
	case fixed[4] != muxVersion1 && fixed[4] != muxVersionAppend:
		return header{}, fmt.Errorf("%w: unknown version %d", ErrBadHeader, fixed[4])
	case h.append && h.group != 0:
		return header{}, fmt.Errorf("%w: append stream header names group %d", ErrBadHeader, h.group)
	}
	addr := make([]byte, fixed[13])
	if _, err := io.ReadFull(r, addr); err != nil {
		return header{}, fmt.Errorf("%w: address: %w", ErrBadHeader, err)
	}
	h.addr = string(addr)
	if err := checkAddr(h.addr); err != nil {
		return header{}, fmt.Errorf("%w: %w", ErrBadHeader, err)
	}
	return h, nil
}
