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
		target, fmt.Sprintf("%.0f", s.OpsPerSec), ratio(s.OpsRatio),
		ms(s.P50), ms(s.P90), ms(s.P99), ms(s.P999),
		fmt.Sprint(s.Errors), dups, bytes, bytesRatio,
	}
}

func ms(us float64) string { return fmt.Sprintf("%.2f", us/1000) }

// WriteText writes one aligned table per workload.
func WriteText(w io.Writer, sums []Summary, workloads []string) error {
	for _, wl := range workloads {
		var rows [][]string
		for _, s := range sums {
			if s.Workload == wl {
				rows = append(rows, row(s))
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n== %s ==\n", wl)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(columns, "\t")+"\t")
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return writeBreakdown(w, sums)
}

// Markdown is one table of every workload and target.
func Markdown(sums []Summary) string {
	var b strings.Builder
	cols := append([]string{"workload"}, columns...)
	b.WriteString("| " + strings.Join(cols, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(cols)) + "\n")
	for _, s := range sums {
		b.WriteString("| " + s.Workload + " | " + strings.Join(row(s), " | ") + " |\n")
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
