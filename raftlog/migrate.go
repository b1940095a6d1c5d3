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
// node wrote before the journal existed: the Pebble database in legacy
// that held the Raft logs, if there is one. The copy is built in a
// directory beside dir and renamed into place, so a crash during it leaves
// the database as it was and the next open starts the copy again. The
// database is removed only once the journal in place opens and holds what
// the database holds (the same groups, last entries and stable values), so
// that a journal directory that is not the finished copy never costs the
// database.
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
	j, err := OpenJournal(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("the journal moved from %s (which is kept): %w", legacy, err)
	}
	if err := verifyMoved(legacy, j, opts); err != nil {
		return nil, errors.Join(fmt.Errorf("the journal in %s does not hold the Raft log of %s (which is kept; remove %s to move it again): %w", dir, legacy, dir, err), j.Close())
	}
	// The journal is complete: the database is a leftover.
	if err := os.RemoveAll(legacy); err != nil {
		return nil, errors.Join(fmt.Errorf("%w: %w", ErrStorage, err), j.Close())
	}
	if err := dirsync.Sync(filepath.Dir(legacy)); err != nil {
		return nil, errors.Join(fmt.Errorf("%w: %w", ErrStorage, err), j.Close())
	}
	return j, nil
}

// verifyMoved checks that j holds what the legacy database holds: each
// group's last entry and each stable value.
func verifyMoved(legacy string, j *Journal, opts JournalOptions) error {
	po := &pebble.Options{ReadOnly: true}
	if opts.Logger != nil {
		po.Logger = opts.Logger
	}
	db, err := pebble.Open(legacy, po)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrStorage, legacy, err)
	}
	defer db.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{legacyLog}, UpperBound: []byte{legacyStable + 1}})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	defer it.Close()
	lastOf := map[uint64]uint64{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < legacyPrefix {
			return fmt.Errorf("%w: key %x", ErrCorrupt, k)
		}
		g := binary.BigEndian.Uint64(k[1:legacyPrefix])
		switch {
		case k[0] == legacyLog && len(k) == legacyPrefix+8:
			lastOf[g] = max(lastOf[g], binary.BigEndian.Uint64(k[legacyPrefix:]))
		case k[0] == legacyStable:
			got, err := j.Group(g).Get(k[legacyPrefix:])
			if err != nil || string(got) != string(it.Value()) {
				return fmt.Errorf("%w: group %d: stable key %q is %x (%v), the database's %x", ErrCorrupt, g, k[legacyPrefix:], got, err, it.Value())
			}
		}
	}
	for g, last := range lastOf {
		if got, _ := j.Group(g).LastIndex(); got != last {
			return fmt.Errorf("%w: group %d ends at entry %d, the database's at %d", ErrCorrupt, g, got, last)
		}
	}
	return nil
}

// migrate copies the legacy database into a new journal at dir.
func migrate(dir, legacy string, opts JournalOptions) error {
	tmp := dir + ".migrating"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	po := &pebble.Options{ReadOnly: true}
	if opts.Logger != nil {
		po.Logger = opts.Logger
	}
	db, err := pebble.Open(legacy, po)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrStorage, legacy, err)
	}
	j, err := OpenJournal(tmp, opts)
	if err != nil {
		return errors.Join(err, db.Close())
	}
	err = copyLegacy(db, j)
	if err = errors.Join(err, j.Close(), db.Close()); err != nil {
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

// The legacy database's layout: a one-byte kind, the group id and the
// rest, integers big-endian, so that Pebble's order is numeric order.
//
//	log entry:    [0x01][group id: 8 bytes][log index: 8 bytes]  -> the entry in the log encoding
//	stable value: [0x02][group id: 8 bytes][key bytes...]        -> raw value
//	layout:       [0x00]"layout"                                 -> legacyLayout (1 byte)
const (
	legacyLog    byte = 0x01
	legacyStable byte = 0x02
	legacyLayout byte = 1
	legacyPrefix      = 1 + 8
)

var legacyLayoutKey = []byte{0x00, 'l', 'a', 'y', 'o', 'u', 't'}

// copyLegacy writes every log entry and stable value of the legacy
// database db into j. A group's entries go in runs of consecutive indexes;
// where the database held a gap (it allowed one after a snapshot restore)
// the journal keeps the run after it, the entries raft can still need.
func copyLegacy(db *pebble.DB, j *Journal) error {
	v, closer, err := db.Get(legacyLayoutKey)
	if err != nil {
		return fmt.Errorf("%w: read the layout version: %w", ErrStorage, err)
	}
	ok := len(v) == 1 && v[0] == legacyLayout
	closer.Close()
	if !ok {
		return fmt.Errorf("%w: found layout %x, want %d", ErrIncompatibleLayout, v, legacyLayout)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{legacyLog}, UpperBound: []byte{legacyStable + 1}})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	c := legacyCopy{j: j, at: -1}
	for ok := it.First(); ok && c.err == nil; ok = it.Next() {
		c.add(it.Key(), it.Value())
	}
	c.finishEntries()
	if c.err == nil && len(c.buf) > 0 {
		c.err = j.commit(c.buf, true)
	}
	if err := it.Close(); err != nil && c.err == nil {
		c.err = fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return c.err
}

// legacyCopy builds the journal's records from the legacy keys, in order.
type legacyCopy struct {
	j              *Journal
	buf            []byte
	at             int // the entries record open in buf, or -1
	group, nextIdx uint64
	err            error
}

// flushAt is how many bytes of records a commit carries.
const flushAt = 1 << 20

func (c *legacyCopy) add(k, v []byte) {
	if len(k) < legacyPrefix {
		c.err = fmt.Errorf("%w: key %x", ErrCorrupt, k)
		return
	}
	g := binary.BigEndian.Uint64(k[1:legacyPrefix])
	switch k[0] {
	case legacyLog:
		if len(k) != legacyPrefix+8 {
			c.err = fmt.Errorf("%w: log key %x", ErrCorrupt, k)
			return
		}
		idx := binary.BigEndian.Uint64(k[legacyPrefix:])
		if enc, err := encodedLogIndex(v); err != nil || enc != idx {
			c.err = fmt.Errorf("%w: group %d: log %d holds %d (%v)", ErrCorrupt, g, idx, enc, err)
			return
		}
		if c.at < 0 || g != c.group || idx != c.nextIdx {
			c.finishEntries()
			c.buf, c.at = beginRecord(c.buf, recEntries)
			c.buf = binary.AppendUvarint(c.buf, g)
		}
		c.group, c.nextIdx = g, idx+1
		c.buf = binary.AppendUvarint(c.buf, uint64(len(v)))
		c.buf = append(c.buf, v...)
	case legacyStable:
		c.finishEntries()
		c.buf = appendStableRecord(c.buf, g, k[legacyPrefix:], v)
	}
	if len(c.buf) >= flushAt {
		c.finishEntries() // the run goes on in a record of its own
		c.err = c.j.commit(c.buf, true)
		c.buf = c.buf[:0]
	}
}

func (c *legacyCopy) finishEntries() {
	if c.at >= 0 {
		c.buf, c.at = finishRecord(c.buf, c.at), -1
	}
}
