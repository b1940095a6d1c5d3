package report

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot writes throughput.{png,svg} (ops/s per workload and target) and
// latency-<workload>.{png,svg} (percentiles per target) into dir, and
// returns the files written.
func Plot(dir string, sums []Summary, workloads, targets []string) ([]string, error) {
	var files []string
	val := func(w, t string, f func(Summary) float64) float64 {
		for _, s := range sums {
			if s.Workload == w && s.Target == t {
				return f(s)
			}
		}
		return 0
	}
	// Throughput: workloads on x, one bar per target.
	groups := make([]plotter.Values, len(targets))
	for i, t := range targets {
		for _, w := range workloads {
			groups[i] = append(groups[i], val(w, t, func(s Summary) float64 { return s.OpsPerSec }))
		}
	}
	fs, err := bars(dir, "throughput", "Throughput (median of rounds)", "ops/s (batch, fill: keys/s)", workloads, targets, groups)
	if err != nil {
		return files, err
	}
	files = append(files, fs...)
	// Latency: percentiles on x, one bar per target, one plot per workload.
	pcts := []string{"p50", "p90", "p99", "p99.9"}
	for _, w := range workloads {
		groups := make([]plotter.Values, len(targets))
		for i, t := range targets {
			for _, f := range []func(Summary) float64{
				func(s Summary) float64 { return s.P50 }, func(s Summary) float64 { return s.P90 },
				func(s Summary) float64 { return s.P99 }, func(s Summary) float64 { return s.P999 },
			} {
				groups[i] = append(groups[i], val(w, t, f)/1000)
			}
		}
		fs, err := bars(dir, "latency-"+w, fmt.Sprintf("%s: latency per call (median of rounds)", w), "ms", pcts, targets, groups)
		if err != nil {
			return files, err
		}
		files = append(files, fs...)
	}
	return files, nil
}

// bars writes a grouped bar chart as name.png and name.svg.
func bars(dir, name, title, ylabel string, x, legend []string, groups []plotter.Values) ([]string, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	w := vg.Points(18)
	if n := len(groups); n > 3 {
		w = vg.Points(54 / float64(n))
	}
	for i, vals := range groups {
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", name, err)
		}
		b.LineStyle.Width = vg.Length(0)
		b.Color = plotutil.Color(i)
		b.Offset = w * vg.Length(float64(i)-float64(len(groups)-1)/2)
		p.Add(b)
		p.Legend.Add(legend[i], b)
	}
	p.NominalX(x...)
	// Room at the sides for the outer bars, above for the legend.
	p.X.Min, p.X.Max = -0.6, float64(len(x))-0.4
	p.Y.Min, p.Y.Max = 0, p.Y.Max*1.3
	var files []string
	for _, ext := range []string{"png", "svg"} {
		f := filepath.Join(dir, name+"."+ext)
		if err := p.Save(8*vg.Inch, 4*vg.Inch, f); err != nil {
			return files, fmt.Errorf("report: save %s: %w", f, err)
		}
		files = append(files, f)
	}
	return files, nil
}
