package stats

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram range: 1 µs to 2 minutes, 3 significant digits.
const (
	minMicros   = 1
	maxMicros   = int64(2 * time.Minute / time.Microsecond)
	sigDigits   = 3
	maxErrTexts = 8
)

// Sample is one call a worker made to a target.
type Sample struct {
	// End is when the call returned, as an offset from the start of the run.
	End time.Duration
	// Latency is how long the call took.
	Latency time.Duration
	// Ops is how many operations (keys) the call carried: 1, or the batch size.
	Ops int
	// Dups is how many of them the target refused as already reserved
	// (duplicates suppressed).
	Dups int
	// Err is the failure of the call, or nil.
	Err error
}

// Recorder keeps the samples of one worker. It is not safe for concurrent
// use: give each worker its own.
type Recorder struct {
	hist     *hdrhistogram.Histogram
	calls    int64
	ops      int64
	errors   int64
	dups     int64
	perSec   []int64 // successful ops by second of End
	errTexts map[string]int64
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{hist: newHist(), errTexts: map[string]int64{}}
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(minMicros, maxMicros, sigDigits) }

// Record adds one sample. A failed call counts as one error and neither its
// operations nor its latency enter the throughput and the percentiles.
func (r *Recorder) Record(s Sample) {
	r.calls++
	if s.Err != nil {
		r.errors++
		t := s.Err.Error()
		if _, ok := r.errTexts[t]; ok || len(r.errTexts) < maxErrTexts {
			r.errTexts[t]++
		}
		return
	}
	r.ops += int64(s.Ops)
	r.dups += int64(s.Dups)
	us := s.Latency.Microseconds()
	us = max(us, minMicros)
	us = min(us, maxMicros)
	_ = r.hist.RecordValue(us) // in range by the clamps above
	sec := int(s.End / time.Second)
	if sec < 0 {
		sec = 0
	}
	for len(r.perSec) <= sec {
		r.perSec = append(r.perSec, 0)
	}
	r.perSec[sec] += int64(s.Ops)
}
