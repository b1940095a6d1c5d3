package raftlog

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// quietLogger drops Pebble's informational messages ("Found 0 WALs", ...)
// and keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(format string, args ...any) { pebble.DefaultLogger.Errorf(format, args...) }
func (quietLogger) Fatalf(format string, args ...any) { pebble.DefaultLogger.Fatalf(format, args...) }

// makeLogs returns entries from..to (inclusive) whose data names the group.
func makeLogs(group, from, to, term uint64) []*raft.Log {
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: payload(group, i)})
	}
	return logs
}

func payload(group, index uint64) []byte { return fmt.Appendf(nil, "g%d/i%d", group, index) }

// openJournal opens a Journal that is closed when the test ends.
func openJournal(t testing.TB, dir string, opts JournalOptions) *Journal {
	t.Helper()
	j, err := OpenJournal(dir, opts)
	if err != nil {
		t.Fatalf("OpenJournal(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := j.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return j
}

func mustStore(t testing.TB, g *JournalGroup, logs []*raft.Log) {
	t.Helper()
	if err := g.StoreLogs(logs); err != nil {
		t.Fatalf("group %d: StoreLogs: %v", g.ID(), err)
	}
}

// checkRange asserts that g holds exactly the entries first..last written
// by makeLogs (first == 0 means empty), and nothing just outside them.
func checkRange(t testing.TB, g *JournalGroup, first, last uint64) {
	t.Helper()
	f, _ := g.FirstIndex()
	l, _ := g.LastIndex()
	if f != first || l != last {
		t.Fatalf("group %d: indexes [%d, %d], want [%d, %d]", g.ID(), f, l, first, last)
	}
	if first == 0 {
		return
	}
	for i := first; i <= last; i++ {
		var got raft.Log
		if err := g.GetLog(i, &got); err != nil {
			t.Fatalf("group %d: GetLog(%d): %v", g.ID(), i, err)
		}
		if got.Index != i || string(got.Data) != string(payload(g.ID(), i)) {
			t.Fatalf("group %d: GetLog(%d) = index %d data %q", g.ID(), i, got.Index, got.Data)
		}
	}
	for _, i := range []uint64{first - 1, last + 1} {
		var got raft.Log
		if err := g.GetLog(i, &got); err != raft.ErrLogNotFound {
			t.Fatalf("group %d: GetLog(%d) outside [%d, %d] = %v, want raft.ErrLogNotFound", g.ID(), i, first, last, err)
		}
	}
}

// testSegmentSize is the segment size of tests that do not need the
// default: a test that reads and rewrites a segment then moves 1 MiB, not
// 64, and leaves the disk to the tests running beside it.
const testSegmentSize = 1 << 20
