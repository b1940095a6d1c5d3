// Package snapio frames the grid's snapshot streams (keyspace's hot state,
// tiering's cold records): big-endian fields written through a buffer into a
// running CRC-32C (Castagnoli), which ends the stream as four bytes. Errors
// are sticky, so a format's encoder and decoder read as straight-line code
// and check once: the first failure is kept and every later call is a no-op.
//
// It depends on the standard library only, so the pure keyspace package can
// use it.
package snapio

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// BufferSize is the buffer of a Writer, and the smallest buffer a Reader
// reuses when handed a *bufio.Reader.
const BufferSize = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Writer writes a checksummed stream.
type Writer struct {
	w   *bufio.Writer
	crc hash.Hash32
	n   int64
	// Err is the first write error; once set, writes do nothing.
	Err error
	buf [8]byte
}

// NewWriter returns a Writer onto w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, BufferSize), crc: crc32.New(castagnoli)}
}

// Raw writes b.
func (w *Writer) Raw(b []byte) {
	if w.Err != nil {
		return
	}
	w.crc.Write(b)
	n, err := w.w.Write(b)
	w.n += int64(n)
	w.Err = err
}

// U32 writes v big-endian.
func (w *Writer) U32(v uint32) {
	binary.BigEndian.PutUint32(w.buf[:4], v)
	w.Raw(w.buf[:4])
}

// U64 writes v big-endian.
func (w *Writer) U64(v uint64) {
	binary.BigEndian.PutUint64(w.buf[:], v)
	w.Raw(w.buf[:])
}

// Written is the number of bytes written so far.
func (w *Writer) Written() int64 { return w.n }

// Finish ends the stream with the CRC-32C of everything written before it
// and flushes. It returns the bytes written and the first error.
func (w *Writer) Finish() (int64, error) {
	w.U32(w.crc.Sum32())
	if w.Err == nil {
		w.Err = w.w.Flush()
	}
	return w.n, w.Err
}

// Reader reads a checksummed stream.
type Reader struct {
	r       *bufio.Reader
	crc     hash.Hash32
	corrupt error
	// Err is the first error; once set, reads return zeros.
	Err error
	buf [8]byte
}

// NewReader returns a Reader of r that reports a short stream as an error
// wrapping corrupt. Given a *bufio.Reader of at least size bytes it reads
// through it, so it consumes exactly the stream's bytes; otherwise its own
// buffer may read past the stream's end.
func NewReader(r io.Reader, size int, corrupt error) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, size), crc: crc32.New(castagnoli), corrupt: corrupt}
}

// Raw fills b.
func (r *Reader) Raw(b []byte) {
	if r.Err != nil {
		return
	}
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.Err = fmt.Errorf("%w: truncated: %w", r.corrupt, err)
		return
	}
	r.crc.Write(b)
}

// U32 reads a big-endian uint32.
func (r *Reader) U32() uint32 {
	r.Raw(r.buf[:4])
	if r.Err != nil {
		return 0
	}
	return binary.BigEndian.Uint32(r.buf[:4])
}

// U64 reads a big-endian uint64.
func (r *Reader) U64() uint64 {
	r.Raw(r.buf[:])
	if r.Err != nil {
		return 0
	}
	return binary.BigEndian.Uint64(r.buf[:])
}

// Fail records err as the stream's error unless one is already recorded.
func (r *Reader) Fail(err error) {
	if r.Err == nil {
		r.Err = err
	}
}

// Verify reads the stream's closing CRC-32C and checks it against
// everything read before it.
func (r *Reader) Verify() error {
	want := r.crc.Sum32()
	var tail [4]byte
	if r.Err != nil {
		return r.Err
	}
	if _, err := io.ReadFull(r.r, tail[:]); err != nil {
		return fmt.Errorf("%w: missing checksum: %w", r.corrupt, err)
	}
	if got := binary.BigEndian.Uint32(tail[:]); got != want {
		return fmt.Errorf("%w: checksum %08x, want %08x", r.corrupt, got, want)
	}
	return nil
}
