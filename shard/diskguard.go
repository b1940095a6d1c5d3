package shard

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/l4xg/grid/keyspace"
)

// DefaultDiskReserve is the disk reserve when HostConfig.DiskReserve is
// zero: room for a few journal segments (64 MiB each), snapshots and the
// cold tier's flushes.
const DefaultDiskReserve int64 = 256 << 20

// diskPoll is how often the disk guard measures the room left, at most.
const diskPoll = 250 * time.Millisecond

// diskGuard keeps the node from filling its disk: below the disk reserve
// (bytes available on the data directory's file system) it refuses new
// keys at admission, the way etcd's capped applier refuses puts past its
// quota, while settles, releases, extends, forgets, reads and Raft's own
// writes go on in the room the reserve keeps. New keys are taken again as
// soon as space is freed: the guard measures the room at most every
// diskPoll, on the requests that need it.
type diskGuard struct {
	dir     string
	reserve atomic.Int64 // <= 0: off

	mu       sync.Mutex   // one measurement at a time
	free     atomic.Int64 // bytes available, last measured
	measured atomic.Bool  // free holds a measurement
	polled   atomic.Int64 // when the last try was, in Unix nanoseconds
}

func newDiskGuard(dir string, reserve int64) *diskGuard {
	g := &diskGuard{dir: dir}
	g.reserve.Store(reserve)
	return g
}

// room returns nil when cmds may be proposed, and an error wrapping
// ErrDiskFull, with the figures, when they hold a Reserve and the room
// left is below the reserve.
func (g *diskGuard) room(cmds []keyspace.Command) error {
	if !grows(cmds) {
		return nil
	}
	return g.full()
}

// full returns nil while the room left is at least the reserve (or
// nothing measured it yet, or there is no reserve), and an error wrapping
// ErrDiskFull, with the figures, while it is below.
func (g *diskGuard) full() error {
	if g == nil {
		return nil
	}
	reserve := g.reserve.Load()
	if reserve <= 0 {
		return nil
	}
	now := time.Now().UnixNano()
	if now-g.polled.Load() >= int64(diskPoll) && g.mu.TryLock() {
		// A failed measurement keeps the last one; with none, nothing is
		// refused.
		if free, _, err := diskSpace(g.dir); err == nil {
			g.free.Store(int64(min(free, 1<<62)))
			g.measured.Store(true)
		}
		g.polled.Store(now)
		g.mu.Unlock()
	}
	if free := g.free.Load(); g.measured.Load() && free < reserve {
		return fmt.Errorf("%w: %s has %d MiB available, below the disk reserve of %d MiB (--disk-reserve-bytes): new keys are refused until space is freed; settles and reads go on",
			ErrDiskFull, g.dir, free>>20, reserve>>20)
	}
	return nil
}

// grows reports whether cmds hold a Reserve: the command that makes new
// records.
func grows(cmds []keyspace.Command) bool {
	for i := range cmds {
		if cmds[i].Op == keyspace.OpReserve {
			return true
		}
	}
	return false
}
