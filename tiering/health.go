package tiering

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// errSource tells apart the kinds of failure that Health tracks.
type errSource int

const (
	sourceBackground errSource = iota // Pebble flushes and compactions
	sourceForeground                  // commits and reads of the Store's callers
	numSources
)

// health keeps the last unrecovered error of each source and rate-limits
// their logging: Pebble retries a failed flush at once and in a loop, so a
// full disk can report thousands of errors a second.
type health struct {
	log     *slog.Logger
	onError func(error)

	// consecutive counts background failures since the last background
	// success; backoffFS spaces retries by it.
	consecutive     atomic.Uint64
	stalled         atomic.Bool
	ballastReleased atomic.Bool
	stalls          atomic.Uint64
	background      atomic.Uint64

	mu         sync.Mutex
	errs       [numSources]error
	lastLog    time.Time
	suppressed int
}

func (h *health) init(log *slog.Logger, onError func(error)) {
	h.log, h.onError = log, onError
}

func (h *health) fail(src errSource, err error) {
	h.mu.Lock()
	h.errs[src] = err
	now := time.Now()
	logIt := now.Sub(h.lastLog) >= time.Second
	suppressed := h.suppressed
	if logIt {
		h.lastLog, h.suppressed = now, 0
	} else {
		h.suppressed++
	}
	h.mu.Unlock()
	if logIt {
		h.log.Error("cold tier storage error", "err", err, "suppressed", suppressed)
	}
	if h.onError != nil {
		h.onError(err)
	}
}

func (h *health) recover(src errSource) {
	h.mu.Lock()
	was := h.errs[src]
	h.errs[src] = nil
	h.mu.Unlock()
	if was != nil {
		h.log.Info("cold tier storage recovered", "after", was)
	}
}

func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, err := range h.errs {
		if err != nil {
			return err
		}
	}
	return nil
}
