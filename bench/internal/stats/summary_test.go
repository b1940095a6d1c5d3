package stats

import (
	"encoding/base64"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The summary is computed from the recorded samples only: known samples in,
// known figures out.
func TestSummarizeKnownSamples(t *testing.T) {
	a, b := NewRecorder(), NewRecorder()
	// 1000 successful calls: latencies 1..1000 µs, spread over two workers
	// and over seconds 0..3.
	for i := 1; i <= 1000; i++ {
		r := a
		if i%2 == 0 {
			r = b
		}
		r.Record(Sample{
			End:     time.Duration(i%4) * time.Second,
			Latency: time.Duration(i) * time.Microsecond,
			Ops:     2,
			Dups:    i % 2, // 500 duplicates
		})
	}
	boom := errors.New("boom")
	for range 7 {
		a.Record(Sample{End: time.Second, Latency: time.Hour, Ops: 2, Err: boom})
	}
	b.Record(Sample{Latency: time.Hour, Ops: 2, Err: errors.New("other")})

	res := Summarize([]*Recorder{a, b}, 4*time.Second)

	if res.Calls != 1008 || res.Ops != 2000 || res.Errors != 8 || res.DupSuppressed != 500 {
		t.Fatalf("calls %d ops %d errors %d dups %d, want 1008 2000 8 500", res.Calls, res.Ops, res.Errors, res.DupSuppressed)
	}
	if res.OpsPerSec != 500 {
		t.Errorf("ops/s %v, want 2000 ops / 4 s = 500", res.OpsPerSec)
	}
	// Failed calls stay out of the percentiles: the hour-long ones would be p99.9.
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", res.P50, 500}, {"p90", res.P90, 900}, {"p99", res.P99, 990}, {"p999", res.P999, 999}, {"max", res.Max, 1000}, {"mean", res.Mean, 500.5}} {
		if math.Abs(c.got-c.want) > c.want*0.001+0.5 {
			t.Errorf("%s = %v µs, want %v", c.name, c.got, c.want)
		}
	}
	if res.ErrorTexts["boom"] != 7 || res.ErrorTexts["other"] != 1 {
		t.Errorf("error texts %v", res.ErrorTexts)
	}
	wantPerSec := []int64{500, 500, 500, 500} // 250 calls of 2 ops in each second
	if len(res.PerSecond) != len(wantPerSec) {
		t.Fatalf("per second %v, want %v", res.PerSecond, wantPerSec)
	}
	for i := range wantPerSec {
		if res.PerSecond[i] != wantPerSec[i] {
			t.Fatalf("per second %v, want %v", res.PerSecond, wantPerSec)
		}
	}
	// The raw histogram decodes back to the same distribution.
	raw, err := base64.StdEncoding.DecodeString(res.Histogram)
	if err != nil {
		t.Fatal(err)
	}
	h, err := hdrhistogram.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if h.TotalCount() != 1000 || h.ValueAtQuantile(50) != int64(res.P50) {
		t.Errorf("decoded histogram: %d samples, p50 %d", h.TotalCount(), h.ValueAtQuantile(50))
	}
}

func TestSummarizeEmpty(t *testing.T) {
	res := Summarize([]*Recorder{NewRecorder()}, 0)
	if res.OpsPerSec != 0 || res.P99 != 0 || res.Calls != 0 {
		t.Fatalf("empty run: %+v", res)
	}
}

func TestLatencyClampedIntoRange(t *testing.T) {
	r := NewRecorder()
	r.Record(Sample{Latency: 0, Ops: 1})
	r.Record(Sample{Latency: time.Hour, Ops: 1})
	res := Summarize([]*Recorder{r}, time.Second)
	if res.P50 != 1 || res.Max < float64(maxMicros)*0.999 {
		t.Fatalf("p50 %v max %v: want 1 µs and the 2 min ceiling", res.P50, res.Max)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
