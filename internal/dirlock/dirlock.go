// Package dirlock keeps two processes from using one directory at once:
// Acquire takes an exclusive lock on a LOCK file in the directory, held
// until Close or until the process ends (a kill -9 releases it too, so a
// crashed node never leaves a stale lock behind), and writes into the file
// which process holds it, so that a second one is told whom it met.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrLocked reports a directory that another process (or another Acquire
// in this one) holds.
var ErrLocked = errors.New("dirlock: directory in use")

// Name is the lock file's name in the directory.
const Name = "LOCK"

// Lock is a held directory lock.
type Lock struct {
	f *os.File
}

// Acquire locks dir, which must exist. It fails with an error wrapping
// ErrLocked, and naming the holder, when the directory is locked already.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, Name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("dirlock: %w", err)
	}
	locked, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("dirlock: lock %s: %w", path, err)
	}
	if !locked {
		holder, _ := os.ReadFile(path)
		f.Close()
		who := strings.TrimSpace(string(holder))
		if who == "" {
			who = "another process"
		}
		return nil, fmt.Errorf("%w: %s is held by %s", ErrLocked, dir, who)
	}
	host, _ := os.Hostname()
	exe, _ := os.Executable()
	who := fmt.Sprintf("pid %d (%s) on %s since %s", os.Getpid(), filepath.Base(exe), host, time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(who+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Close releases the lock. The file stays: removing it could let a third
// process lock a new file while a second still waits on the old one.
func (l *Lock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
