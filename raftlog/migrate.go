package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/l4xg/grid/internal/dirsync"
)

// OpenJournalFrom opens the journal in dir, first moving into it what a
// node wrote before the journal existed: the Pebble [Store] in legacy, if
// there is one. The copy is built in a directory beside dir and renamed
// into place, so a crash during it leaves the Store as it was and the next
// open starts the copy again; the Store is removed once the journal is in
// place.
func OpenJournalFrom(dir, legacy string, opts JournalOptions) (*Journal, error) {
	if _, err := os.Stat(legacy); errors.Is(err, fs.ErrNotExist) {
		return OpenJournal(dir, opts)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := migrate(dir, legacy, opts); err != nil {
			return nil, fmt.Errorf("move the Raft log from %s to a journal: %w", legacy, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	// The journal is complete: the Store is a leftover.
	if err := os.RemoveAll(legacy); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	if err := dirsync.Sync(filepath.Dir(legacy)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return OpenJournal(dir, opts)
}

// migrate copies the Store in legacy into a new journal at dir.
func migrate(dir, legacy string, opts JournalOptions) error {
	tmp := dir + ".migrating"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	s, err := Open(legacy, Options{Logger: opts.Logger})
	if err != nil {
		return err
	}
	j, err := OpenJournal(tmp, opts)
	if err != nil {
		return errors.Join(err, s.Close())
	}
	err = copyStore(s, j)
	if err = errors.Join(err, j.Close(), s.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	if err := dirsync.Sync(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return nil
}

// copyStore writes every log entry and stable value of s into j. A group's
// entries go in runs of consecutive indexes; where the Store held a gap
// (it allowed one after a snapshot restore) the journal keeps the run after
// it, the entries raft can still need.
func copyStore(s *Store, j *Journal) error {
	db, err := s.db.Acquire()
	if err != nil {
		return err
	}
	defer s.db.Release()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindLog}, UpperBound: []byte{kindStable + 1}})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	var (
		buf             []byte
		at              = -1 // the open entries record in buf, or -1
		group, nextIdx  uint64
		flushEvery      = 1 << 20
		errCopy         error
		finishOpenEntry = func() {
			if at >= 0 {
				buf, at = finishRecord(buf, at), -1
			}
		}
	)
	for ok := it.First(); ok && errCopy == nil; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) < groupPrefixLen {
			errCopy = fmt.Errorf("%w: key %x", ErrCorrupt, k)
			break
		}
		g := binary.BigEndian.Uint64(k[1:groupPrefixLen])
		switch k[0] {
		case kindLog:
			idx, valid := logIndexFromKey(k)
			if !valid {
				errCopy = fmt.Errorf("%w: log key %x", ErrCorrupt, k)
				break
			}
			if enc, err := encodedLogIndex(v); err != nil || enc != idx {
				errCopy = fmt.Errorf("%w: group %d: log %d holds %d (%v)", ErrCorrupt, g, idx, enc, err)
				break
			}
			if at < 0 || g != group || idx != nextIdx {
				finishOpenEntry()
				buf, at = beginRecord(buf, recEntries)
				buf = binary.AppendUvarint(buf, g)
			}
			group, nextIdx = g, idx+1
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		case kindStable:
			finishOpenEntry()
			buf = appendStableRecord(buf, g, k[groupPrefixLen:], v)
		}
		if len(buf) >= flushEvery && errCopy == nil {
			finishOpenEntry() // the run goes on in a record of its own
			errCopy = j.commit(buf)
			buf = buf[:0]
		}
	}
	finishOpenEntry()
	if errCopy == nil && len(buf) > 0 {
		errCopy = j.commit(buf)
	}
	if err := it.Close(); err != nil && errCopy == nil {
		errCopy = fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return errCopy
}
