package report

import (
	"slices"

	"github.com/l4xg/grid/bench/internal/stats"
	"github.com/l4xg/grid/bench/internal/workload"
)

// GridTarget is the target every other one is compared with.
const GridTarget = "grid"

// Cell is one workload run against one target in one round, at one
// concurrency.
type Cell struct {
	Round    int    `json:"round"`
	Workload string `json:"workload"`
	Target   string `json:"target"`
	// Concurrency is the run's callers. Results written before the
	// concurrency sweep lack it: their run's single --concurrency.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate is the calls per second an open-loop run was asked for (0:
	// closed loop).
	Rate   float64          `json:"rate,omitempty"`
	Result *workload.Result `json:"result,omitempty"`
	Error  string           `json:"error,omitempty"`
}

// Summary is one workload against one target at one concurrency over the
// rounds: medians of the rounds' figures, totals of their counts.
// Latencies in microseconds.
type Summary struct {
	Workload    string  `json:"workload"`
	Target      string  `json:"target"`
	Concurrency int     `json:"concurrency,omitempty"`
	Rounds      int     `json:"rounds"`
	OpsPerSec   float64 `json:"ops_per_s"`
	// AskedRate is the median of the calls per second the rounds of an
	// open-loop run were asked for, CallsPerSec the median of those they
	// made (failed calls included); both 0 for a closed loop.
	AskedRate     float64 `json:"asked_rate,omitempty"`
	CallsPerSec   float64 `json:"calls_per_s,omitempty"`
	P50           float64 `json:"p50_us"`
	P90           float64 `json:"p90_us"`
	P99           float64 `json:"p99_us"`
	P999          float64 `json:"p999_us"`
	Errors        int64   `json:"errors"`
	DupSuppressed int64   `json:"dup_suppressed"`
	// Ops is the operations of all rounds, the base of DupSuppressed's share.
	Ops int64 `json:"ops"`
	// BytesPerKey is fill's memory per key; HasBytes tells it was measured.
	BytesPerKey  float64 `json:"bytes_per_key,omitempty"`
	HasBytes     bool    `json:"has_bytes,omitempty"`
	MemorySource string  `json:"memory_source,omitempty"`
	// ExtraPerKey is the median per key of the target's extra memory figures.
	ExtraPerKey map[string]float64 `json:"extra_per_key,omitempty"`
	// OpsRatio is ops/s of this target over the grid's, the median of the
	// per-round ratios (0 without a grid figure). BytesRatio likewise.
	OpsRatio   float64 `json:"ops_ratio_to_grid,omitempty"`
	BytesRatio float64 `json:"bytes_ratio_to_grid,omitempty"`
	// FailedRounds counts rounds whose run failed as a whole.
	FailedRounds int `json:"failed_rounds,omitempty"`
	// Breakdown is the median over the rounds of each figure of the
	// target's stage breakdown (Breakdown).
	Breakdown map[string]float64 `json:"breakdown,omitempty"`
}

// Summarize computes a Summary per workload, concurrency and target, in
// the given orders of workloads and targets and by rising concurrency,
// from the cells. Ratios to the grid are to its cell of the same round and
// concurrency.
func Summarize(cells []Cell, workloads, targets []string) []Summary {
	type key struct {
		w, t string
		conc int
	}
	byKey := map[key][]Cell{}
	concs := map[string][]int{}
	for _, c := range cells {
		k := key{c.Workload, c.Target, c.Concurrency}
		byKey[k] = append(byKey[k], c)
		if !slices.Contains(concs[c.Workload], c.Concurrency) {
			concs[c.Workload] = append(concs[c.Workload], c.Concurrency)
		}
	}
	gridOf := func(w string, conc, round int) *workload.Result {
		for _, c := range byKey[key{w, GridTarget, conc}] {
			if c.Round == round && c.Result != nil {
				return c.Result
			}
		}
		return nil
	}
	var out []Summary
	for _, w := range workloads {
		slices.Sort(concs[w])
		for _, conc := range concs[w] {
			for _, t := range targets {
				cs := byKey[key{w, t, conc}]
				if len(cs) == 0 {
					continue
				}
				out = append(out, summarize(Summary{Workload: w, Target: t, Concurrency: conc}, cs,
					func(round int) *workload.Result { return gridOf(w, conc, round) }))
			}
		}
	}
	return out
}

// summarize fills s from the cells of its rounds; gridOf is the grid's
// result of a round, nil when there is none.
func summarize(s Summary, cs []Cell, gridOf func(round int) *workload.Result) Summary {
	extra, parts := map[string][]float64{}, map[string][]float64{}
	var ops, p50, p90, p99, p999, bpk, opsRatio, bytesRatio, asked, calls []float64
	for _, c := range cs {
		r := c.Result
		if r == nil {
			s.FailedRounds++
			continue
		}
		s.Rounds++
		ops = append(ops, r.OpsPerSec)
		p50, p90 = append(p50, r.P50), append(p90, r.P90)
		p99, p999 = append(p99, r.P99), append(p999, r.P999)
		s.Errors += r.Errors
		s.DupSuppressed += r.DupSuppressed
		s.Ops += r.Ops
		for k, v := range r.Breakdown {
			parts[k] = append(parts[k], v)
		}
		if r.Fill != nil {
			bpk = append(bpk, r.Fill.BytesPerKey)
			s.MemorySource = r.Fill.After.Source
			for k, v := range r.Fill.ExtraPerKey {
				extra[k] = append(extra[k], v)
			}
		}
		if c.Rate > 0 && r.ElapsedSec > 0 {
			asked = append(asked, c.Rate)
			calls = append(calls, float64(r.Calls)/r.ElapsedSec)
		}
		if g := gridOf(c.Round); g != nil {
			if g.OpsPerSec > 0 {
				opsRatio = append(opsRatio, r.OpsPerSec/g.OpsPerSec)
			}
			if r.Fill != nil && g.Fill != nil && g.Fill.BytesPerKey > 0 {
				bytesRatio = append(bytesRatio, r.Fill.BytesPerKey/g.Fill.BytesPerKey)
			}
		}
	}
	s.OpsPerSec = stats.Median(ops)
	s.P50, s.P90, s.P99, s.P999 = stats.Median(p50), stats.Median(p90), stats.Median(p99), stats.Median(p999)
	if len(bpk) > 0 {
		s.BytesPerKey, s.HasBytes = stats.Median(bpk), true
	}
	for k, vs := range extra {
		if s.ExtraPerKey == nil {
			s.ExtraPerKey = map[string]float64{}
		}
		s.ExtraPerKey[k] = stats.Median(vs)
	}
	for k, vs := range parts {
		if s.Breakdown == nil {
			s.Breakdown = map[string]float64{}
		}
		s.Breakdown[k] = stats.Median(vs)
	}
	s.OpsRatio, s.BytesRatio = stats.Median(opsRatio), stats.Median(bytesRatio)
	s.AskedRate, s.CallsPerSec = stats.Median(asked), stats.Median(calls)
	return s
}
