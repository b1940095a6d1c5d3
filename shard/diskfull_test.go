package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/testclock"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/tiering"
)

// coldDiskFull fails the cold tier's sstable writes with ENOSPC while on.
type coldDiskFull struct{ on atomic.Bool }

func (f *coldDiskFull) String() string { return "cold disk full" }

func (f *coldDiskFull) MaybeError(op errorfs.Op) error {
	if !f.on.Load() || !strings.HasSuffix(op.Path, ".sst") {
		return nil
	}
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate,
		errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return fmt.Errorf("write %s: %w", op.Path, syscall.ENOSPC)
	}
	return nil
}

// TestColdDiskFullStallsAndRecovers: when the cold tier cannot write (a full
// disk), demotion stalls the shard's apply loop instead of dropping records;
// the tier reports the error; once space is back the shard catches up and
// every acknowledged record answers as before, from either tier.
func TestColdDiskFullStallsAndRecovers(t *testing.T) {
	dir := t.TempDir()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	full := &coldDiskFull{}
	cold, err := tiering.Open(filepath.Join(dir, "cold"), tiering.Options{
		FS: errorfs.Wrap(vfs.Default, full), MemTableSize: 64 << 10, BallastSize: -1, Logger: discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Close()
	logs, err := raftlog.OpenJournal(filepath.Join(dir, "journal"), raftlog.JournalOptions{NoSync: true, Logger: pebbleLogger{discard}})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	clock := testclock.New()
	s, err := Open(Config{ID: 0, NodeID: "n1", SnapshotDir: filepath.Join(dir, "snapshots"), Logs: logs, Bootstrap: true,
		Cold: cold.Shard(0), Clock: clock.Now, TickInterval: time.Hour, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	const n = 6000 // ~500 KB of cold records: past 4 memtables of 64 KB
	keys := make([]digest.Digest, n)
	for i := 0; i < n; i += 500 {
		var reserves []keyspace.Command
		for j := i; j < i+500; j++ {
			keys[j] = digest.Key("t", []byte(fmt.Sprint("key-", j)))
			reserves = append(reserves, keyspace.Command{Op: keyspace.OpReserve, Digest: keys[j], Lease: 60_000, Retention: 7 * 86_400_000, MaxAttempts: 3})
		}
		res := propose(t, s, reserves...)
		completes := make([]keyspace.Command, len(res))
		for j, r := range res {
			completes[j] = keyspace.Command{Op: keyspace.OpComplete, Digest: reserves[j].Digest, Token: r.Token,
				Retention: 7 * 86_400_000, Result: []byte("done")}
		}
		propose(t, s, completes...)
	}

	full.on.Store(true)
	clock.Add(25 * time.Hour)
	// Ticks demote until the cold tier's memtables are full and its writes
	// stall: the tick that stalls does not come back in time.
	stalled := false
	for range 10 {
		tctx, tcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := s.prop.propose(tctx, nil, true)
		tcancel()
		if err != nil {
			if !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("tick during a full disk: %v", err)
			}
			stalled = true
			break
		}
	}
	if !stalled {
		t.Fatalf("demoting %d records onto a full disk never stalled (cold keys %d)", n, s.Status().Cold.Keys)
	}
	testwait.For(t, 20*time.Second, "the cold tier to report the full disk", func() bool {
		err := cold.Health()
		return err != nil && errors.Is(err, syscall.ENOSPC)
	})

	full.on.Store(false)
	testwait.For(t, 20*time.Second, "the cold tier to recover", func() bool { return cold.Health() == nil })
	for range 10 { // the remaining demotions
		if _, err := s.prop.propose(context.Background(), nil, true); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Status()
	if st.Keys != 0 || st.Cold.Keys != n {
		t.Fatalf("after recovery: hot %d, cold %d; want 0, %d", st.Keys, st.Cold.Keys, n)
	}
	for i := 0; i < n; i += 97 {
		got := propose(t, s, keyspace.Command{Op: keyspace.OpReserve, Digest: keys[i], Lease: 60_000, Retention: 86_400_000, MaxAttempts: 3})[0]
		if got.Outcome != keyspace.OutcomeDuplicate || string(got.Result) != "done" || !got.Cold {
			t.Fatalf("key %d after recovery: %+v", i, got)
		}
	}
}
