package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// faultClockPoll is how often a faultClock re-reads its file.
const faultClockPoll = 100 * time.Millisecond

// faultClock is the node's clock moved by an offset that a file holds, for
// fault injection (the chaos tool's clock skew): the file holds a Go
// duration ("1.5s", "-300ms"); a missing or empty file is no offset. The
// file is re-read every faultClockPoll, so a test moves the clock of a
// running node by writing the file. It exists only when serve is started
// with --enable-fault-injection.
type faultClock struct {
	path   string
	offset atomic.Int64 // ns
	log    *slog.Logger
}

// newFaultClock reads path once (a bad offset is an error at start) and
// keeps re-reading it until ctx ends.
func newFaultClock(ctx context.Context, path string, log *slog.Logger) (*faultClock, error) {
	c := &faultClock{path: path, log: log}
	d, err := c.read()
	if err != nil {
		return nil, err
	}
	c.set(d)
	go c.poll(ctx)
	return c, nil
}

// Now is the clock's time.
func (c *faultClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *faultClock) read() (time.Duration, error) {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("fault clock file %s: %w", c.path, err)
	}
	return d, nil
}

func (c *faultClock) set(d time.Duration) {
	if old := time.Duration(c.offset.Swap(int64(d))); old != d {
		c.log.Warn("fault injection: clock offset", "offset", d, "was", old, "file", c.path)
	}
}

func (c *faultClock) poll(ctx context.Context) {
	t := time.NewTicker(faultClockPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d, err := c.read()
		if err != nil {
			c.log.Error("fault injection: clock offset file unreadable, offset kept", "err", err)
			continue
		}
		c.set(d)
	}
}
