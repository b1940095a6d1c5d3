package tiering

import (
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble v2.1.7 reschedules a failed flush at once, with no backoff (a
// TODO in its flush loop): on a full disk it retries thousands of times a
// second, each try creating and removing a table file. backoffFS spaces
// those tries out: while background writes keep failing, creating a table
// file first waits 10 ms, doubling per consecutive failure up to 1 s. The
// wait runs in Pebble's flush or compaction goroutine outside Pebble's
// mutex (Pebble releases it around table I/O), ends early when the Store
// closes, and costs nothing once a flush or compaction has succeeded.
type backoffFS struct {
	vfs.FS
	h       *health
	closing <-chan struct{}
}

const (
	minRetryDelay = 10 * time.Millisecond
	maxRetryDelay = time.Second
)

// retryDelay is the wait before the next try after n consecutive failures.
func retryDelay(n uint64) time.Duration {
	if n == 0 {
		return 0
	}
	return min(minRetryDelay<<min(n-1, 16), maxRetryDelay)
}

func (fs *backoffFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob") {
		if d := retryDelay(fs.h.consecutive.Load()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-fs.closing:
				t.Stop()
			}
		}
	}
	return fs.FS.Create(name, category)
}

// Unwrap returns the wrapped filesystem (see vfs.Root).
func (fs *backoffFS) Unwrap() vfs.FS { return fs.FS }
