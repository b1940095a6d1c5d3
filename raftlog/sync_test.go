package raftlog

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// walSyncFS wraps a vfs.FS and counts syncs of Pebble's WAL files,
// optionally adding latency to each to model a slow disk.
type walSyncFS struct {
	vfs.FS
	delay time.Duration
	syncs atomic.Int64
}

const walCategory vfs.DiskWriteCategory = "pebble-wal"

func (fs *walSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(f, c, err)
}

func (fs *walSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(f, c, err)
}

func (fs *walSyncFS) wrap(f vfs.File, c vfs.DiskWriteCategory, err error) (vfs.File, error) {
	if err != nil || c != walCategory {
		return f, err
	}
	return &walFile{File: f, fs: fs}, nil
}

func (fs *walSyncFS) synced() {
	fs.syncs.Add(1)
	if fs.delay > 0 {
		time.Sleep(fs.delay) // disk latency, not synchronisation
	}
}

type walFile struct {
	vfs.File
	fs *walSyncFS
}

func (f *walFile) Sync() error     { f.fs.synced(); return f.File.Sync() }
func (f *walFile) SyncData() error { f.fs.synced(); return f.File.SyncData() }
func (f *walFile) SyncTo(n int64) (bool, error) {
	f.fs.synced()
	return f.File.SyncTo(n)
}

func openCounting(tb testing.TB, opts Options, delay time.Duration) (*Store, *walSyncFS) {
	tb.Helper()
	fs := &walSyncFS{FS: vfs.Default, delay: delay}
	opts.Logger = quietLogger{}
	s, err := open(tb.TempDir(), opts, fs)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s, fs
}

// Every acknowledged write is fsynced; NoSync writes are not.
func TestWritesAreSynced(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		s, fs := openCounting(t, Options{NoSync: noSync}, 0)
		g := s.Group(1)
		before := fs.syncs.Load()
		const writes = 20
		for i := uint64(1); i <= writes/4; i++ {
			mustStore(t, g, makeLogs(1, i, i, 1))
			if err := g.SetUint64([]byte("CurrentTerm"), i); err != nil {
				t.Fatal(err)
			}
			if err := g.Set([]byte("LastVoteCand"), []byte("n1")); err != nil {
				t.Fatal(err)
			}
			if err := g.DeleteRange(i, i); err != nil {
				t.Fatal(err)
			}
		}
		syncs := fs.syncs.Load() - before
		t.Logf("NoSync=%v: %d writes, %d WAL syncs", noSync, writes, syncs)
		if !noSync && syncs < writes {
			t.Errorf("%d synced writes caused %d WAL syncs, want >= %d", writes, syncs, writes)
		}
		if noSync && syncs >= writes {
			t.Errorf("NoSync: %d writes caused %d WAL syncs, want fewer", writes, syncs)
		}
	}
}

// Concurrent synced writes from different groups share WAL syncs (group
// commit). Each sync takes 2ms, so writers pile up behind it; a store that
// serialised synced writes per call would need one sync per batch.
func TestConcurrentGroupsShareSyncs(t *testing.T) {
	s, fs := openCounting(t, Options{}, 2*time.Millisecond)
	const groups, batches = 8, 25
	before := fs.syncs.Load()
	var wg sync.WaitGroup
	for id := uint64(1); id <= groups; id++ {
		wg.Go(func() {
			g := s.Group(id)
			for i := uint64(1); i <= batches; i++ {
				if err := g.StoreLogs(makeLogs(id, 4*i-3, 4*i, 1)); err != nil {
					t.Errorf("group %d: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	syncs := fs.syncs.Load() - before
	t.Logf("%d synced batches from %d groups took %d WAL syncs", groups*batches, groups, syncs)
	if syncs > groups*batches/2 {
		t.Fatalf("%d synced batches took %d WAL syncs; want at most %d (syncs not shared)", groups*batches, syncs, groups*batches/2)
	}
	for id := uint64(1); id <= groups; id++ {
		checkRange(t, s.Group(id), 1, 4*batches)
	}
}

const killChildEnv = "RAFTLOG_TEST_KILL_CHILD_DIR"

// TestAckedWritesSurviveKill runs a child process that stores entries in a
// Journal, from two groups at once, and prints "acked N" once both groups'
// writes of N returned; it SIGKILLs the child and checks that every
// acknowledged entry and stable value is there after reopening. (A process
// kill does not lose the OS page cache, so this checks that writes reach
// the segment file before StoreLogs returns; TestJournalWritesAreSynced
// checks that they are fsynced.) Small segments make the child roll and
// remove segments while it runs.
func TestAckedWritesSurviveKill(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAckedWritesSurviveKill$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // if we fail before the kill below
	const want = 1000
	var acked uint64
	sc := bufio.NewScanner(stdout)
	for acked < want && sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			if acked, err = strconv.ParseUint(n, 10, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = cmd.Process.Kill() // SIGKILL: no deferred Close, no flush
	_ = cmd.Wait()
	if acked < want {
		t.Fatalf("child stopped after %d acks; stderr:\n%s", acked, stderr.String())
	}

	j := openJournal(t, dir, killJournalOptions)
	for id := uint64(1); id <= 2; id++ {
		g := j.Group(id)
		last, err := g.LastIndex()
		if err != nil || last < acked {
			t.Fatalf("group %d: LastIndex after kill = %d, %v; want >= %d acked", id, last, err, acked)
		}
		first, _ := g.FirstIndex()
		// The child deletes only entries killKeep behind its newest, which
		// is at most acked+1.
		if first > acked+2-killKeep {
			t.Fatalf("group %d: first entry after kill %d; the child kept %d entries behind %d", id, first, killKeep, acked)
		}
		checkJournalRange(t, g, first, last)
		if n, err := g.GetUint64([]byte("acked")); err != nil || n < acked {
			t.Fatalf("group %d: stable value after kill = %d, %v; want >= %d", id, n, err, acked)
		}
	}
}

// killJournalOptions are small segments, so the child rolls often.
var killJournalOptions = JournalOptions{SegmentSize: 16 << 10}

// killKeep is how many entries the child keeps when it compacts.
const killKeep = 50

func killChild(dir string) {
	j, err := OpenJournal(dir, killJournalOptions)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// Bounded, so an orphaned child cannot run forever.
	for i := uint64(1); i <= 100_000; i++ {
		var wg sync.WaitGroup
		for id := uint64(1); id <= 2; id++ {
			wg.Go(func() {
				g := j.Group(id)
				err := g.StoreLogs([]*raft.Log{{Index: i, Term: 1, Data: payload(id, i)}})
				if err == nil {
					err = g.SetUint64([]byte("acked"), i)
				}
				if err == nil && i%100 == 0 {
					err = g.DeleteRange(1, i-killKeep)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
			})
		}
		wg.Wait()
		fmt.Fprintf(os.Stdout, "acked %d\n", i)
	}
	os.Exit(0)
}
