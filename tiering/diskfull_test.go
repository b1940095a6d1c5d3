package tiering

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/l4xg/grid/internal/testwait"
)

// diskFull fails sstable writes with ENOSPC while it is on. MANIFEST writes
// are spared: Pebble treats their failure as fatal (see doc.go). With
// ballastFrees, removing the ballast turns it off, as the space it frees
// would.
type diskFull struct {
	on           atomic.Bool
	ballastFrees bool
}

func (f *diskFull) String() string { return "disk full" }

func (f *diskFull) MaybeError(op errorfs.Op) error {
	if f.ballastFrees && op.Kind == errorfs.OpRemove && strings.HasSuffix(op.Path, ballastName) {
		f.on.Store(false)
	}
	if !f.on.Load() || !strings.HasSuffix(op.Path, ".sst") {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate,
		errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return fmt.Errorf("write %s: %w", op.Path, syscall.ENOSPC)
	}
	return nil
}

// A full disk (sstable writes fail with ENOSPC) stalls the writer instead
// of losing records, is reported through OnError, Health and Stats, and
// clears by itself once space is back.
func TestDiskFullReportsStallsAndRecovers(t *testing.T) {
	full := &diskFull{}
	var reported atomic.Int64
	opts := testOptions()
	opts.FS = errorfs.Wrap(vfs.NewMem(), full)
	opts.MemTableSize = 64 << 10
	opts.OnError = func(err error) {
		if errors.Is(err, syscall.ENOSPC) {
			reported.Add(1)
		}
	}
	s := openTest(t, opts)
	sh := s.Shard(1)
	const before, total = 200, 6000 // 6000 records are ~1.2 MB: past 4 memtables
	want := fill(t, sh, 0, before)
	if err := s.db.With(func(db *pebble.DB) error { return db.Flush() }); err != nil {
		t.Fatal(err)
	}

	full.on.Store(true)
	done := make(chan struct{})
	go func() { // the state machine, applying on
		defer close(done)
		for i := before; i < total; i++ {
			r := settled(i, int64(1000+i), int64(5000+i))
			sh.Put(keyDigest("ns", i), &r)
			if i%10 == 9 {
				if err := sh.Flush(); err != nil {
					t.Error(err)
					return
				}
			}
		}
		if err := sh.Flush(); err != nil {
			t.Error(err)
		}
	}()
	testwait.For(t, 20*time.Second, "a write stall with ENOSPC reported", func() bool {
		st, err := s.Stats()
		return err == nil && st.Stalled && reported.Load() > 0 && errors.Is(s.Health(), syscall.ENOSPC)
	})
	select {
	case <-done:
		t.Fatal("the writer finished while the disk was full")
	default:
	}

	full.on.Store(false)
	<-done
	testwait.For(t, 20*time.Second, "Health to clear", func() bool { return s.Health() == nil })
	for i := before; i < total; i++ {
		want[keyDigest("ns", i)] = settled(i, int64(1000+i), int64(5000+i))
	}
	checkHolds(t, sh, want)
	if err := s.db.With(func(db *pebble.DB) error {
		if err := db.Flush(); err != nil {
			return err
		}
		return db.Compact(t.Context(), []byte{0}, []byte{0xff}, true)
	}); err != nil {
		t.Fatal(err)
	}
	checkHolds(t, sh, want)
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Stalled || st.WriteStalls == 0 || st.BackgroundErrors == 0 {
		t.Fatalf("store stats = %+v", st)
	}
	t.Logf("ENOSPC reports while full: %d; store stats %+v", reported.Load(), st)
}

// A restore that cannot write its sstables fails with ErrStorage and
// leaves the shard as it was; it succeeds once space is back.
func TestRestoreOnFullDiskKeepsRecords(t *testing.T) {
	full := &diskFull{}
	opts := testOptions()
	opts.FS = errorfs.Wrap(vfs.NewMem(), full)
	s := openTest(t, opts)
	src := s.Shard(1)
	want := fill(t, src, 0, 500)
	stream := dump(t, src)
	dst := s.Shard(2)
	kept := fill(t, dst, 1000, 5)

	full.on.Store(true)
	err := dst.Restore(bytes.NewReader(stream))
	if !errors.Is(err, ErrStorage) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Restore on a full disk = %v, want ErrStorage wrapping ENOSPC", err)
	}
	checkHolds(t, dst, kept)
	full.on.Store(false)
	if err := dst.Restore(bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	checkHolds(t, dst, want)
	left, err := opts.FS.List(opts.FS.PathJoin("cold", ingestDir))
	if err != nil || len(left) != 0 {
		t.Fatalf("restore files left: %v (%v)", left, err)
	}
}

// The first ENOSPC releases the ballast; the write that met it is retried
// in the room it left and succeeds: no failed flush, no stall, no record
// lost, and the release is reported.
func TestBallastAbsorbsDiskFull(t *testing.T) {
	full := &diskFull{ballastFrees: true}
	var diskFullReports atomic.Int64
	opts := testOptions()
	opts.FS = errorfs.Wrap(vfs.NewMem(), full)
	opts.MemTableSize = 64 << 10
	opts.OnError = func(err error) {
		if errors.Is(err, ErrDiskFull) {
			diskFullReports.Add(1)
		}
	}
	s := openTest(t, opts)
	sh := s.Shard(1)
	full.on.Store(true)
	want := fill(t, sh, 0, 3000) // several memtables' worth: flushes run
	if err := s.db.With(func(db *pebble.DB) error { return db.Flush() }); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !st.BallastReleased || diskFullReports.Load() != 1 || st.BackgroundErrors != 0 || s.Health() != nil {
		t.Fatalf("stats %+v, %d ErrDiskFull reports, health %v", st, diskFullReports.Load(), s.Health())
	}
	if full.on.Load() {
		t.Fatal("the ballast was not removed")
	}
	checkHolds(t, sh, want)
}
