package raftlog

import "errors"

// Sentinel errors. Returned errors wrap one of these (test with errors.Is),
// except for the two cases that hashicorp/raft matches exactly; see
// ErrKeyNotFound and JournalGroup.GetLog.
var (
	// ErrClosed is returned by any operation on a Journal after Close.
	ErrClosed = errors.New("raftlog: journal closed")
	// ErrCorrupt reports stored data that cannot be decoded.
	ErrCorrupt = errors.New("raftlog: corrupt data")
	// ErrInvalidOptions reports options that fail Validate.
	ErrInvalidOptions = errors.New("raftlog: invalid options")
	// ErrInvalidArgument reports a bad argument, such as a nil log entry.
	ErrInvalidArgument = errors.New("raftlog: invalid argument")
	// ErrIncompatibleLayout reports data written in a format this version
	// of the package does not understand.
	ErrIncompatibleLayout = errors.New("raftlog: incompatible on-disk layout")
	// ErrStorage wraps an error from the file system (or from the Pebble
	// database an older build left).
	ErrStorage = errors.New("raftlog: storage error")
	// ErrNoSpace reports a write of log entries refused because the disk
	// has no room for the journal's next segment. Nothing was written; the
	// journal accepts entries again once there is room.
	ErrNoSpace = errors.New("raftlog: no space")
	// ErrLocked reports a journal directory that another process (or
	// another Journal in this one) has open.
	ErrLocked = errors.New("raftlog: journal in use")

	// ErrKeyNotFound is returned, unwrapped, by JournalGroup.Get and
	// JournalGroup.GetUint64 for a key that was never set. Its message is
	// exactly "not found", without the package prefix, because
	// hashicorp/raft recognises stable-store misses by comparing
	// err.Error() == "not found" (the convention of raft-boltdb).
	ErrKeyNotFound = errors.New("not found")
)

// Logger receives the journal's warnings (and the log lines of the Pebble
// database an older build left, while it is moved). It has the same method
// set as pebble.Logger. Fatalf must not return.
type Logger interface {
	Infof(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}
