package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// columns of both tables.
var columns = []string{"target", "ops/s", "vs grid", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "errors", "dup-suppressed (share of ops)", "bytes/key", "B/key vs grid"}

func row(s Summary) []string {
	ratio := func(r float64) string {
		if r == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", r)
	}
	bytes := "-"
	if s.HasBytes {
		bytes = fmt.Sprintf("%.1f", s.BytesPerKey)
	}
	bytesRatio := "-"
	if s.HasBytes {
		bytesRatio = ratio(s.BytesRatio)
	}
	dups := fmt.Sprint(s.DupSuppressed)
	if s.DupSuppressed > 0 && s.Ops > 0 {
		dups += fmt.Sprintf(" (%.0f%%)", 100*float64(s.DupSuppressed)/float64(s.Ops))
	}
	target := s.Target
	if s.FailedRounds > 0 {
		target += fmt.Sprintf(" (%d rounds failed)", s.FailedRounds)
	}
	return []string{
		target, opsPerSec(s), ratio(s.OpsRatio),
		ms(s.P50), ms(s.P90), ms(s.P99), ms(s.P999),
		fmt.Sprint(s.Errors), dups, bytes, bytesRatio,
	}
}

func ms(us float64) string { return fmt.Sprintf("%.2f", us/1000) }

// Reached is the share of an open-loop run's asked rate below which the
// target is said not to have kept up: the pacing's start and the run's
// end cost a run that keeps up a little of its rate.
const Reached = 0.95

// opsPerSec is a summary's ops/s and, for an open-loop run, the rate it
// was asked for, saying so when the target made fewer calls than
// Reached of it.
func opsPerSec(s Summary) string {
	out := fmt.Sprintf("%.0f", s.OpsPerSec)
	switch {
	case s.AskedRate <= 0:
	case s.CallsPerSec < Reached*s.AskedRate:
		out += fmt.Sprintf(" (asked %.0f calls/s, made %.0f: %.0f%%, could not keep up)", s.AskedRate, s.CallsPerSec, 100*s.CallsPerSec/s.AskedRate)
	default:
		out += fmt.Sprintf(" (asked %.0f calls/s)", s.AskedRate)
	}
	return out
}

// WriteText writes one aligned table per workload; in a sweep, with a
// row per concurrency and target.
func WriteText(w io.Writer, sums []Summary, workloads []string) error {
	swept := Swept(sums)
	cols := columns
	if swept {
		cols = append([]string{"callers"}, columns...)
	}
	for _, wl := range workloads {
		var rows [][]string
		for _, s := range sums {
			if s.Workload != wl {
				continue
			}
			r := row(s)
			if swept {
				r = append([]string{fmt.Sprint(s.Concurrency)}, r...)
			}
			rows = append(rows, r)
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n== %s ==\n", wl)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return writeBreakdown(w, sums)
}

// Markdown is one table of every workload and target at the headline
// concurrency; in a sweep, with each target's peak ops/s over the sweep
// and the callers it was reached with.
func Markdown(sums []Summary, headline int) string {
	var b strings.Builder
	swept := Swept(sums)
	cols := append([]string{"workload"}, columns...)
	if swept {
		cols = append(cols, "peak ops/s (callers)")
	}
	b.WriteString("| " + strings.Join(cols, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(cols)) + "\n")
	for _, s := range AtConcurrency(sums, headline) {
		r := row(s)
		if swept {
			peak := "-"
			if p, ok := Peak(sums, s.Workload, s.Target); ok {
				peak = fmt.Sprintf("%.0f (%d)", p.OpsPerSec, p.Concurrency)
			}
			r = append(r, peak)
		}
		b.WriteString("| " + s.Workload + " | " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// Markers delimit the generated table in a README.
const (
	BeginMarker = "<!-- bench:begin -->"
	EndMarker   = "<!-- bench:end -->"
)

// ReplaceBetween replaces what lies between the markers in doc with body
// (the markers stay). Both markers must be present, in order, once.
func ReplaceBetween(doc, body string) (string, error) {
	if strings.Count(doc, BeginMarker) != 1 || strings.Count(doc, EndMarker) != 1 {
		return "", fmt.Errorf("report: want exactly one %s and one %s", BeginMarker, EndMarker)
	}
	i := strings.Index(doc, BeginMarker) + len(BeginMarker)
	j := strings.Index(doc, EndMarker)
	if j < i {
		return "", fmt.Errorf("report: %s before %s", EndMarker, BeginMarker)
	}
	return doc[:i] + "\n" + strings.TrimSpace(body) + "\n" + doc[j:], nil
}
