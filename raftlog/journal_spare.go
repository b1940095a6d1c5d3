package raftlog

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"
)

// spareName is the spare segment's file name: not a segment name, so
// replay passes it by.
const spareName = "next-segment.spare"

// spareRetry is how often a journal without room for its next segment
// tries again to make one, at most.
const spareRetry = time.Second

// spareSegment is the segment file a Journal keeps made ahead of need: a
// file preallocated to the segment size under a name replay ignores,
// renamed into place when the journal rolls. With it a roll needs no new
// disk space, so a disk that fills up does not fail whichever write
// happens to need the next segment. When the spare cannot be made, the
// journal knows that its next roll would fail while the segment being
// written still has room: it refuses the writes that grow the logs (the
// entries of StoreLogs, with ErrNoSpace) and keeps that room for what
// raft must be able to write whatever happens: terms, votes and deleted
// ranges (raft panics when it cannot save a term). It tries to make the
// spare again, at most once every spareRetry, when such a write comes,
// and resumes as soon as it can: the journal recovers by itself once
// space is freed.
type spareSegment struct {
	mu      sync.Mutex // guards ready, closed and the file
	ready   bool
	closed  bool
	noRoom  atomic.Bool  // the last try to make the spare failed
	lastTry atomic.Int64 // when it was, in Unix nanoseconds
}

// init makes a new spare when the journal opens; one left by an earlier
// run is made again, in case it was cut short.
func (s *spareSegment) init(j *Journal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.makeLocked(j)
}

// make makes the spare, unless there is one.
func (s *spareSegment) make(j *Journal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.makeLocked(j)
}

func (s *spareSegment) makeLocked(j *Journal) {
	if s.ready || s.closed {
		return
	}
	name := j.path(spareName)
	f, err := j.fs.Create(name)
	if err == nil {
		err = f.Preallocate(j.opts.SegmentSize)
		if err == nil {
			err = f.SyncData()
		}
		err = errors.Join(err, f.Close())
		if err == nil {
			err = j.fs.SyncDir(j.dir)
		}
		if err != nil {
			_ = j.fs.Remove(name)
		}
	}
	if err != nil {
		s.lastTry.Store(time.Now().UnixNano())
		if !s.noRoom.Swap(true) {
			j.logf("raftlog: journal %s: no room for the next segment (%d bytes): new log entries are refused until there is: %v",
				j.dir, j.opts.SegmentSize, err)
		}
		return
	}
	s.ready = true
	if s.noRoom.Swap(false) {
		j.logf("raftlog: journal %s: room for the next segment again: log entries are accepted", j.dir)
	}
}

// take renames the spare to name and opens it; it returns a nil file when
// there is no spare.
func (s *spareSegment) take(j *Journal, name string) (journalFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		return nil, nil
	}
	s.ready = false
	if err := j.fs.Rename(j.path(spareName), name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	f, err := j.fs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return f, nil
}

// room returns nil when a write that grows the logs may go ahead, and
// ErrNoSpace while the journal has no room for its next segment (trying
// to make it again when the last try is spareRetry old).
func (s *spareSegment) room(j *Journal) error {
	if !s.noRoom.Load() {
		return nil
	}
	now := time.Now().UnixNano()
	if last := s.lastTry.Load(); now-last >= int64(spareRetry) && s.lastTry.CompareAndSwap(last, now) && s.mu.TryLock() {
		s.makeLocked(j)
		s.mu.Unlock()
		if !s.noRoom.Load() {
			return nil
		}
	}
	return fmt.Errorf("%w: no room on the disk of %s for the next journal segment (%d bytes); new log entries are refused until there is",
		ErrNoSpace, j.dir, j.opts.SegmentSize)
}

// close stops making spares: the journal is closing.
func (s *spareSegment) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
