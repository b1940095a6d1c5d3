package report

import (
	"fmt"
	"slices"
	"strings"
)

// A run with several concurrencies (a sweep) has, per workload and target,
// one Summary per concurrency. Its headline is one concurrency of them:
// the tables of the README and the bar plots show that one, with each
// target's peak over the sweep beside it.

// concurrencies are the distinct concurrencies of workload w's summaries,
// rising.
func concurrencies(sums []Summary, w string) []int {
	var out []int
	for _, s := range sums {
		if s.Workload == w && !slices.Contains(out, s.Concurrency) {
			out = append(out, s.Concurrency)
		}
	}
	slices.Sort(out)
	return out
}

// Swept reports whether any workload of sums ran at several concurrencies.
func Swept(sums []Summary) bool {
	seen := map[string]bool{}
	for _, s := range sums {
		if !seen[s.Workload] {
			seen[s.Workload] = true
			if len(concurrencies(sums, s.Workload)) > 1 {
				return true
			}
		}
	}
	return false
}

// AtConcurrency is the summaries of concurrency conc, and those without a
// concurrency.
func AtConcurrency(sums []Summary, conc int) []Summary {
	var out []Summary
	for _, s := range sums {
		if s.Concurrency == conc || s.Concurrency == 0 {
			out = append(out, s)
		}
	}
	return out
}

// Peak is the summary of workload w and target t with the most ops/s over
// the concurrencies, and whether w ran at more than one (there is a peak
// to speak of).
func Peak(sums []Summary, w, t string) (Summary, bool) {
	var best Summary
	n := 0
	for _, s := range sums {
		if s.Workload != w || s.Target != t {
			continue
		}
		n++
		if n == 1 || s.OpsPerSec > best.OpsPerSec {
			best = s
		}
	}
	return best, len(concurrencies(sums, w)) > 1 && n > 0
}

// MarkdownSweep is the whole sweep in Markdown, a row per workload,
// concurrency and target; "" when nothing was swept.
func MarkdownSweep(sums []Summary) string {
	if !Swept(sums) {
		return ""
	}
	cols := []string{"workload", "callers", "target", "ops/s", "vs grid", "p50 ms", "p99 ms", "p99.9 ms", "errors"}
	var b strings.Builder
	b.WriteString("| " + strings.Join(cols, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(cols)) + "\n")
	for _, s := range sums {
		if len(concurrencies(sums, s.Workload)) < 2 {
			continue
		}
		r := row(s)
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Workload, s.Concurrency, r[0], r[1], r[2], r[3], r[5], r[6], r[7])
	}
	return b.String()
}
