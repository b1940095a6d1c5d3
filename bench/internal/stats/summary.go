package stats

import (
	"github.com/HdrHistogram/hdrhistogram-go"

	"encoding/base64"
	"maps"
	"slices"
	"sort"
	"time"
)

// Result is the summary of one run of one workload against one target.
// Latencies are in microseconds.
type Result struct {
	Calls         int64   `json:"calls"`
	Ops           int64   `json:"ops"`
	ElapsedSec    float64 `json:"elapsed_s"`
	OpsPerSec     float64 `json:"ops_per_s"`
	P50           float64 `json:"p50_us"`
	P90           float64 `json:"p90_us"`
	P99           float64 `json:"p99_us"`
	P999          float64 `json:"p999_us"`
	Max           float64 `json:"max_us"`
	Mean          float64 `json:"mean_us"`
	Errors        int64   `json:"errors"`
	DupSuppressed int64   `json:"dup_suppressed"`
	// ErrorTexts counts the first distinct error messages.
	ErrorTexts map[string]int64 `json:"error_texts,omitempty"`
	// PerSecond is the successful ops completed in each second of the run.
	PerSecond []int64 `json:"per_second"`
	// Histogram is the merged latency histogram (µs), HdrHistogram V2
	// compressed encoding in base64: the raw distribution.
	Histogram string `json:"hdr_histogram_v2"`
}

// Summarize merges the recorders of one run that lasted elapsed.
func Summarize(recs []*Recorder, elapsed time.Duration) Result {
	h := newHist()
	var res Result
	res.ErrorTexts = map[string]int64{}
	for _, r := range recs {
		h.Merge(r.hist)
		res.Calls += r.calls
		res.Ops += r.ops
		res.Errors += r.errors
		res.DupSuppressed += r.dups
		for i, n := range r.perSec {
			for len(res.PerSecond) <= i {
				res.PerSecond = append(res.PerSecond, 0)
			}
			res.PerSecond[i] += n
		}
		for _, t := range slices.Sorted(maps.Keys(r.errTexts)) {
			if _, ok := res.ErrorTexts[t]; ok || len(res.ErrorTexts) < maxErrTexts {
				res.ErrorTexts[t] += r.errTexts[t]
			}
		}
	}
	if len(res.ErrorTexts) == 0 {
		res.ErrorTexts = nil
	}
	res.ElapsedSec = elapsed.Seconds()
	if elapsed > 0 {
		res.OpsPerSec = float64(res.Ops) / elapsed.Seconds()
	}
	if h.TotalCount() > 0 {
		q := h.ValueAtPercentilesSlice([]float64{50, 90, 99, 99.9})
		res.P50, res.P90, res.P99, res.P999 = float64(q[0]), float64(q[1]), float64(q[2]), float64(q[3])
		res.Max = float64(h.Max())
		res.Mean = h.Mean()
	}
	if enc, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
		res.Histogram = base64.StdEncoding.EncodeToString(enc)
	}
	return res
}

// Median is the median of xs (the mean of the two middle values for an even
// count), 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
