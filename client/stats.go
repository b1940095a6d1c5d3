package client

import (
	"sync/atomic"
	"time"
)

// Stats is what a Client's automatic batching measured of the calls it
// answered so far, for a caller that wants to see where a call's time
// goes: how long calls waited in their node's queue before a batch took
// them, and how long the batch then took to answer them (the network and
// the grid). Calls sent as unary RPCs (WithBatching(false), Batch) are not
// counted.
type Stats struct {
	// Calls is the calls answered after a batch took them, with or without
	// an error; Batches the batches sent (stream frames or Batch RPCs).
	Calls, Batches uint64
	// QueueWait is the Calls' time from being queued until a batch took
	// them, summed; Answer their time from then until answered, summed.
	QueueWait, Answer time.Duration
}

// callStats accumulates Stats for every batcher of a Client.
type callStats struct {
	calls, batches, queueNanos, answerNanos atomic.Uint64
}

func (s *callStats) batch() { s.batches.Add(1) }

// answered counts a call queued at queued, taken at taken and answered
// now.
func (s *callStats) answered(queued, taken time.Time) {
	now := time.Now()
	s.calls.Add(1)
	s.queueNanos.Add(uint64(taken.Sub(queued)))
	s.answerNanos.Add(uint64(now.Sub(taken)))
}

func (s *callStats) snapshot() Stats {
	return Stats{
		Calls:     s.calls.Load(),
		Batches:   s.batches.Load(),
		QueueWait: time.Duration(s.queueNanos.Load()),
		Answer:    time.Duration(s.answerNanos.Load()),
	}
}

// Stats returns what the client's automatic batching measured so far.
func (c *Client) Stats() Stats { return c.stats.snapshot() }
