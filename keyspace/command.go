package keyspace

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/l4xg/grid/digest"
)

// Op is the type byte of a command inside a log entry.
//
// Unknown-type rule: an op below opIgnorable that this version does not know
// means the log was written by a newer binary whose semantics we cannot
// reproduce, so decoding fails (and the FSM halts rather than diverge). Ops at
// or above opIgnorable are optional hints, encoded with flags 0 and a
// length-prefixed payload; older binaries skip them with an OutcomeIgnored
// result. A new op that changes state must take a value below. Unknown flag
// bits are refused like unknown ops.
//
// A new optional field takes a new flag bit and appends its payload after
// the fields an entry of its op already carries, only when its flag is set:
// entries written before it existed still decode, to the same commands, and
// a command that does not use it encodes to the same bytes as before. Bits
// 4 (request id, Reserve) and 5 (show token, Get) came that way; an entry
// that sets them is refused by a binary older than them, as the rule says.
type Op uint8

const (
	OpReserve Op = iota + 1
	OpComplete
	OpFail
	OpRelease
	OpExtend
	OpForget
	// OpGet reads a record in log order: a linearizable read evaluated at
	// the entry's stamp. It changes nothing.
	OpGet

	opIgnorable Op = 0x80
)

var opNames = [...]string{"", "reserve", "complete", "fail", "release", "extend", "forget", "get"}

func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Command is one operation on one record. Durations are milliseconds and
// always explicit: the API fills defaults before proposing, so every replica
// applies exactly the same values.
type Command struct {
	Op     Op
	Digest digest.Digest
	Token  uint64 // Complete, Fail, Release, Extend

	Lease     int64 // Reserve, Extend
	Retention int64 // Complete; Fail and Reserve: retention if the record is poisoned

	MaxAttempts    uint8 // Reserve
	HasFingerprint bool  // Reserve
	Fingerprint    uint64
	HasEntity      bool // Reserve
	Entity         digest.Digest
	Version        uint64
	// HasRequestID and RequestID (Reserve): RequestIDHash of the request
	// id the caller gave the reserve, the same across its resends.
	HasRequestID bool
	RequestID    uint64

	// ShowToken (Get): the operator view, which includes the record's
	// token. Without it a Get answers no token.
	ShowToken bool

	HasRetryAfter bool // Fail
	RetryAfter    int64
	Poison        bool // Fail

	Result []byte // Complete (and the payload of an ignorable op); aliases the decoded entry
}

// Entry is one Raft log entry: a batch of commands stamped by the leader with
// Now (Unix ms). A Tick entry carries time forward on an idle shard, reclaims
// a bounded number of expired records and demotes settled ones to the cold
// tier; it may carry the leader's tiering policy, and commands.
//
// An entry with HasLayout (encoding version 2) carries the layout of the
// tokens it grants, and its settles find their key under any slot bits
// (held.go). One without (version 1, the log of a binary from before tokens
// named their shard) grants index<<16 | position and settles by the exact
// digest. The rules an entry is applied by are so written in the entry:
// a replica replaying an old entry after an upgrade computes what the
// replicas that applied it before did, whatever snapshot it starts from,
// and a binary that does not know version 2 refuses it (and halts) instead
// of applying it differently.
type Entry struct {
	Now       int64
	Tick      bool
	HasPolicy bool // Tick only
	Policy    TierPolicy
	HasLayout bool
	Layout    digest.TokenLayout
	Commands  []Command
}

// MaxEntryCommands bounds the commands of one entry, so the command's
// position fits in the low 16 bits of its fencing token.
const MaxEntryCommands = digest.MaxTokenPosition

// entryVersionLayout is the version of an entry that carries its token
// layout, after the stamp (Entry.HasLayout).
const entryVersionLayout = 2

const (
	entryVersion   = 1
	kindCommands   = 1
	kindTick       = 2
	kindTickPolicy = 3 // a tick that sets the tiering policy

	cmdFingerprint = 1 << 0
	cmdEntity      = 1 << 1
	cmdRetryAfter  = 1 << 2
	cmdPoison      = 1 << 3
	cmdRequestID   = 1 << 4
	cmdShowToken   = 1 << 5

	cmdKnownFlags = cmdFingerprint | cmdEntity | cmdRetryAfter | cmdPoison | cmdRequestID | cmdShowToken
)

// ErrCorruptEntry is returned for bytes that are not a valid entry.
var ErrCorruptEntry = errors.New("keyspace: corrupt log entry")

// AppendEntry appends the encoding of e to buf.
func AppendEntry(buf []byte, e *Entry) []byte {
	kind := byte(kindCommands)
	switch {
	case e.Tick && e.HasPolicy:
		kind = kindTickPolicy
	case e.Tick:
		kind = kindTick
	}
	version := byte(entryVersion)
	if e.HasLayout {
		version = entryVersionLayout
	}
	buf = append(buf, version, kind)
	buf = binary.BigEndian.AppendUint64(buf, uint64(e.Now))
	if e.HasLayout {
		buf = append(buf, e.Layout.Bits)
		buf = binary.AppendUvarint(buf, uint64(e.Layout.Shard))
	}
	if kind == kindTickPolicy {
		buf = binary.AppendUvarint(buf, uint64(e.Policy.HotWindow))
		buf = binary.AppendUvarint(buf, uint64(e.Policy.HotMaxBytes))
	}
	buf = binary.AppendUvarint(buf, uint64(len(e.Commands)))
	for i := range e.Commands {
		buf = appendCommand(buf, &e.Commands[i])
	}
	return buf
}

func appendCommand(buf []byte, c *Command) []byte {
	var flags byte
	if c.HasFingerprint {
		flags |= cmdFingerprint
	}
	if c.HasEntity {
		flags |= cmdEntity
	}
	if c.HasRetryAfter {
		flags |= cmdRetryAfter
	}
	if c.Poison {
		flags |= cmdPoison
	}
	if c.HasRequestID {
		flags |= cmdRequestID
	}
	if c.ShowToken {
		flags |= cmdShowToken
	}
	buf = append(buf, byte(c.Op), flags)
	buf = c.Digest.Append(buf)
	switch c.Op {
	case OpReserve:
		buf = binary.AppendUvarint(buf, uint64(c.Lease))
		buf = binary.AppendUvarint(buf, uint64(c.Retention))
		buf = append(buf, c.MaxAttempts)
		if c.HasFingerprint {
			buf = binary.BigEndian.AppendUint64(buf, c.Fingerprint)
		}
		if c.HasEntity {
			buf = c.Entity.Append(buf)
			buf = binary.AppendUvarint(buf, c.Version)
		}
		if c.HasRequestID {
			buf = binary.BigEndian.AppendUint64(buf, c.RequestID)
		}
	case OpComplete:
		buf = binary.AppendUvarint(buf, c.Token)
		buf = binary.AppendUvarint(buf, uint64(c.Retention))
		buf = binary.AppendUvarint(buf, uint64(len(c.Result)))
		buf = append(buf, c.Result...)
	case OpFail:
		buf = binary.AppendUvarint(buf, c.Token)
		buf = binary.AppendUvarint(buf, uint64(c.Retention))
		if c.HasRetryAfter {
			buf = binary.AppendUvarint(buf, uint64(c.RetryAfter))
		}
	case OpRelease:
		buf = binary.AppendUvarint(buf, c.Token)
	case OpExtend:
		buf = binary.AppendUvarint(buf, c.Token)
		buf = binary.AppendUvarint(buf, uint64(c.Lease))
	default:
		if c.Op >= opIgnorable {
			buf = binary.AppendUvarint(buf, uint64(len(c.Result)))
			buf = append(buf, c.Result...)
		}
	}
	return buf
}

// DecodeEntry decodes an entry. Command results alias b. It never panics on
// malformed input; it returns an error wrapping ErrCorruptEntry.
func DecodeEntry(b []byte) (Entry, error) {
	d := decoder{b: b}
	var e Entry
	switch v := d.byte(); v {
	case entryVersion:
	case entryVersionLayout:
		e.HasLayout = true
	default:
		return e, fmt.Errorf("%w: version %d, want %d or %d", ErrCorruptEntry, v, entryVersion, entryVersionLayout)
	}
	switch d.byte() {
	case kindCommands:
	case kindTick:
		e.Tick = true
	case kindTickPolicy:
		e.Tick, e.HasPolicy = true, true
	default:
		return e, fmt.Errorf("%w: unknown entry kind", ErrCorruptEntry)
	}
	e.Now = int64(d.uint64())
	if e.HasLayout {
		bits, shard := d.byte(), d.uvarint()
		if d.err != nil {
			return e, d.err
		}
		if shard > 1<<digest.MaxTokenBits {
			return e, fmt.Errorf("%w: token layout names shard %d", ErrCorruptEntry, shard)
		}
		e.Layout = digest.TokenLayout{Shard: uint32(shard), Bits: bits}
		if err := e.Layout.Validate(); err != nil {
			return e, fmt.Errorf("%w: %w", ErrCorruptEntry, err)
		}
	}
	if e.HasPolicy {
		e.Policy = TierPolicy{HotWindow: int64(d.uvarint()), HotMaxBytes: int64(d.uvarint())}
		if d.err != nil {
			return e, d.err
		}
		if err := e.Policy.Validate(); err != nil {
			return e, err
		}
	}
	n := d.uvarint()
	if d.err != nil || n > MaxEntryCommands || n > uint64(len(d.b)) {
		return e, fmt.Errorf("%w: bad command count", ErrCorruptEntry)
	}
	e.Commands = make([]Command, 0, n)
	for i := uint64(0); i < n; i++ {
		c, err := d.command()
		if err != nil {
			return e, err
		}
		e.Commands = append(e.Commands, c)
	}
	if d.err != nil {
		return e, d.err
	}
	if len(d.b) != 0 {
		return e, fmt.Errorf("%w: %d trailing bytes", ErrCorruptEntry, len(d.b))
	}
	return e, nil
}

func (d *decoder) command() (Command, error) {
	c := Command{Op: Op(d.byte())}
	flags := d.byte()
	known := byte(cmdKnownFlags)
	if c.Op >= opIgnorable {
		known = 0 // an ignorable op keeps all its data in its payload
	}
	if flags&^known != 0 && d.err == nil {
		// A flag this version does not know may change what the command
		// does: refuse rather than apply it differently from its writer.
		d.err = fmt.Errorf("%w: unknown command flags %#x", ErrCorruptEntry, flags)
	}
	c.Digest = d.digest()
	c.HasFingerprint = flags&cmdFingerprint != 0
	c.HasEntity = flags&cmdEntity != 0
	c.HasRetryAfter = flags&cmdRetryAfter != 0
	c.Poison = flags&cmdPoison != 0
	c.HasRequestID = flags&cmdRequestID != 0
	c.ShowToken = flags&cmdShowToken != 0
	switch c.Op {
	case OpReserve:
		c.Lease = d.duration()
		c.Retention = d.duration()
		c.MaxAttempts = d.byte()
		if c.HasFingerprint {
			c.Fingerprint = d.uint64()
		}
		if c.HasEntity {
			c.Entity = d.digest()
			c.Version = d.uvarint()
		}
		if c.HasRequestID {
			c.RequestID = d.uint64()
		}
	case OpComplete:
		c.Token = d.uvarint()
		c.Retention = d.duration()
		c.Result = d.bytes()
	case OpFail:
		c.Token = d.uvarint()
		c.Retention = d.duration()
		if c.HasRetryAfter {
			c.RetryAfter = d.duration()
		}
	case OpRelease:
		c.Token = d.uvarint()
	case OpExtend:
		c.Token = d.uvarint()
		c.Lease = d.duration()
	case OpForget, OpGet:
	default:
		if c.Op < opIgnorable {
			return c, fmt.Errorf("%w: unknown op %d", ErrCorruptEntry, c.Op)
		}
		// An ignorable op carries its payload length-prefixed, kept in
		// Result so the entry re-encodes to the same bytes.
		c.Result = d.bytes()
	}
	return c, d.err
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated", ErrCorruptEntry)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uint64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) digest() digest.Digest {
	if len(d.b) < digest.Size {
		d.fail()
		return digest.Digest{}
	}
	v, _ := digest.Decode(d.b[:digest.Size])
	d.b = d.b[digest.Size:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// duration reads a non-negative millisecond count that fits an int64.
func (d *decoder) duration() int64 {
	v := d.uvarint()
	if v > 1<<62 {
		if d.err == nil {
			d.err = fmt.Errorf("%w: duration out of range", ErrCorruptEntry)
		}
		return 0
	}
	return int64(v)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	if n == 0 {
		return nil
	}
	return v
}
