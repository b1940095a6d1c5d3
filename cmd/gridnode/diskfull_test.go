package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/internal/tmpfs"
)

// onTmpfs mounts a tmpfs of size bytes on a new directory for the test.
func onTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := tmpfs.Mount(dir, size); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("a disk of fixed size needs root: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tmpfs.Unmount(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}

// available is the room left on dir's file system.
func available(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fill takes room on dir's file system with a file until left bytes remain,
// or all of it (left 0); it returns the file.
func fill(t *testing.T, dir string, left int64) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := available(t, dir) - left
	for size > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err == nil || left > 0 {
			break
		}
		size -= 1 << 20 // a full disk: take what there is
	}
	if left == 0 {
		buf := make([]byte, 64<<10)
		for {
			if _, err := f.Write(buf); err != nil {
				break
			}
		}
	}
	return path
}

// A node on a disk that fills up: below its disk reserve it refuses new
// keys with ResourceExhausted naming the reserve, while settles and reads
// go on; once space is freed it takes new keys again by itself. A disk
// filled to the last byte by something else does not bring the node down
// (raft panics when it cannot save a term; the journal keeps room for
// them), and it serves again once space is freed, without a restart.
func TestNodeOnAFillingDisk(t *testing.T) {
	disk := onTmpfs(t, 640<<20)
	data := filepath.Join(disk, "data")
	p := launchProc(t, os.Stderr, "--data-dir", data, "--listen", "127.0.0.1:0", "--http-listen", "", "--log-level", "error",
		"--shards", "2", "--disk-reserve-bytes", "128000000")
	p.waitReady(t, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held, err := c.Reserve(ctx, "disk", "held")
	if err != nil || held.Outcome != client.OutcomeAcquired {
		t.Fatalf("reserve before the disk fills: %+v, %v", held, err)
	}

	filler := fill(t, disk, 64<<20)
	var refused error
	tries := 0
	testwait.For(t, 10*time.Second, "new keys refused below the disk reserve", func() bool {
		tries++ // a new key each time: the first may come before the guard measures
		_, refused = c.Reserve(ctx, "disk", fmt.Sprintf("early-%d", tries))
		return errors.Is(refused, client.ErrLimitExceeded)
	}, func() string { return fmt.Sprint(refused) })
	if !strings.Contains(refused.Error(), "disk reserve") || !strings.Contains(refused.Error(), "--disk-reserve-bytes") {
		t.Fatalf("the refusal %q does not name the disk reserve", refused)
	}
	// status says so, in text and in JSON.
	code, stdout, stderr := cli(t, "status", "--addr", p.addr)
	if code != 0 || !strings.Contains(stdout, "disk below its reserve (--disk-reserve-bytes): new keys are refused") {
		t.Fatalf("status below the disk reserve: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, "status", "--addr", p.addr, "--json")
	if m := oneJSON(t, stdout); code != 0 || m["disk_full"] != true {
		t.Fatalf("status --json below the disk reserve: exit %d %v", code, m)
	}
	if r, err := c.Complete(ctx, "disk", "held", held.Token); err != nil || r.Outcome != client.OutcomeOK {
		t.Fatalf("a settle below the disk reserve: %+v, %v", r, err)
	}
	if r, err := c.Get(ctx, "disk", "held"); err != nil || r.State != client.StateCompleted {
		t.Fatalf("a read below the disk reserve: %+v, %v", r, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var r client.Result
	testwait.For(t, 10*time.Second, "new keys taken once space is freed", func() bool {
		r, err = c.Reserve(ctx, "disk", "new")
		return err == nil && r.Outcome == client.OutcomeAcquired
	}, func() string { return fmt.Sprintf("%+v, %v (%d MiB available)", r, err, available(t, disk)>>20) })
	code, stdout, _ = cli(t, "status", "--addr", p.addr, "--json")
	if m := oneJSON(t, stdout); code != 0 || m["disk_full"] != false {
		t.Fatalf("status --json once space is freed: exit %d %v", code, m)
	}

	// The disk filled to the last byte by another process.
	filler = fill(t, disk, 0)
	if got := available(t, disk); got > 1<<20 {
		t.Fatalf("%d bytes left after filling the disk", got)
	}
	// The journal's segments are preallocated: reads and settles go on.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := c.Get(short, "disk", "held")
		cancel()
		if err != nil || r.State != client.StateCompleted {
			t.Fatalf("read %d on a full disk: %+v, %v", i, r, err)
		}
		select {
		case <-p.Exited():
			t.Fatalf("the node exited on a full disk: %v", p.Err())
		default:
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the node serving new keys again after the full disk, without a restart", func() bool {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := c.Reserve(short, "disk", "after")
		return err == nil && r.Outcome == client.OutcomeAcquired
	})
	select {
	case <-p.Exited():
		t.Fatalf("the node exited: %v", p.Err())
	default:
	}
	if r, err := c.Get(ctx, "disk", "held"); err != nil || r.State != client.StateCompleted {
		t.Fatalf("the key completed before the full disk: %+v, %v", r, err)
	}
}
