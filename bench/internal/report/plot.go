package report

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/l4xg/grid/bench/internal/workload"
)

// countsKeys reports whether workload w's operations are keys (several per
// call) rather than calls: its ops/s are keys/s, on a scale of their own.
func countsKeys(w string) bool { return w == workload.Batch || w == workload.Fill }

// Plot writes into dir, at the headline concurrency: throughput.{png,svg},
// a panel of ops/s and one of keys/s (batch, fill), each on its own axis;
// latency-<workload>.{png,svg}, the percentiles per target; and for each
// workload run at several concurrencies sweep-<workload>.{png,svg}, p99
// against throughput with a point per concurrency. It returns the files
// written.
func Plot(dir string, sums []Summary, workloads, targets []string, headline int) ([]string, error) {
	var files []string
	head := AtConcurrency(sums, headline)
	val := func(w, t string, f func(Summary) float64) float64 {
		for _, s := range head {
			if s.Workload == w && s.Target == t {
				return f(s)
			}
		}
		return 0
	}
	title := "Throughput (median of rounds)"
	if Swept(sums) {
		title = fmt.Sprintf("Throughput at %d callers (median of rounds)", headline)
	}
	// Throughput: workloads on x, one bar per target; calls and keys apart.
	var panels []*plot.Plot
	for _, keys := range []bool{false, true} {
		var ws []string
		for _, w := range workloads {
			if countsKeys(w) == keys {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			continue
		}
		groups := make([]plotter.Values, len(targets))
		for i, t := range targets {
			for _, w := range ws {
				groups[i] = append(groups[i], val(w, t, func(s Summary) float64 { return s.OpsPerSec }))
			}
		}
		unit, t := "ops/s", title
		if keys {
			unit, t = "keys/s", "batch and fill count keys"
		}
		p, err := barPlot(t, unit, ws, targets, groups)
		if err != nil {
			return files, err
		}
		panels = append(panels, p)
	}
	fs, err := save(dir, "throughput", panels...)
	files = append(files, fs...)
	if err != nil {
		return files, err
	}
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
		p, err := barPlot(fmt.Sprintf("%s: latency per call (median of rounds)", w), "ms", pcts, targets, groups)
		if err != nil {
			return files, err
		}
		fs, err := save(dir, "latency-"+w, p)
		files = append(files, fs...)
		if err != nil {
			return files, err
		}
	}
	for _, w := range workloads {
		if len(concurrencies(sums, w)) < 2 {
			continue
		}
		p, err := sweepPlot(sums, w, targets)
		if err != nil {
			return files, err
		}
		fs, err := save(dir, "sweep-"+w, p)
		files = append(files, fs...)
		if err != nil {
			return files, err
		}
	}
	return files, nil
}

// barPlot is a grouped bar chart: a group per x, a bar per legend entry.
func barPlot(title, ylabel string, x, legend []string, groups []plotter.Values) (*plot.Plot, error) {
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
			return nil, fmt.Errorf("report: %s: %w", title, err)
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
	return p, nil
}

// sweepPlot is workload w's p99 (log scale) against its throughput, a line
// per target through its concurrencies, each point labelled with its
// callers. Points without a p99 (failed runs) are left out.
func sweepPlot(sums []Summary, w string, targets []string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: p99 against throughput, a point per number of callers (median of rounds)", w)
	p.X.Label.Text = "ops/s"
	if countsKeys(w) {
		p.X.Label.Text = "keys/s"
	}
	p.Y.Label.Text = "p99 ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	lo, hi, xmax := math.Inf(1), 0.0, 0.0
	for i, t := range targets {
		var pts plotter.XYLabels
		for _, s := range sums {
			if s.Workload != w || s.Target != t || s.P99 <= 0 {
				continue
			}
			y := s.P99 / 1000
			pts.XYs = append(pts.XYs, plotter.XY{X: s.OpsPerSec, Y: y})
			pts.Labels = append(pts.Labels, strconv.Itoa(s.Concurrency))
			lo, hi, xmax = min(lo, y), max(hi, y), max(xmax, s.OpsPerSec)
		}
		if len(pts.XYs) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts.XYs)
		if err != nil {
			return nil, fmt.Errorf("report: sweep %s %s: %w", w, t, err)
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		line.Width = vg.Points(1.5)
		points.Shape = plotutil.Shape(i)
		labels, err := plotter.NewLabels(pts)
		if err != nil {
			return nil, fmt.Errorf("report: sweep %s %s: %w", w, t, err)
		}
		labels.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(3)}
		for j := range labels.TextStyle {
			labels.TextStyle[j].Color = plotutil.Color(i)
		}
		p.Add(line, points, labels)
		p.Legend.Add(t, line, points)
	}
	if hi > 0 {
		// Room above for the legend, at the right for the last labels.
		p.Y.Min, p.Y.Max = lo/1.5, hi*3
		p.X.Min, p.X.Max = 0, xmax*1.12
	}
	return p, nil
}

// logTicks marks a log axis at 1, 2 and 5 times the powers of ten, with
// unlabelled ticks at the other multiples, so that a range within one
// decade still shows figures.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	labelled := 0
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for m := 1; m < 10; m++ {
			v := math.Pow(10, e) * float64(m)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', 3, 64)
				labelled++
			}
			out = append(out, t)
		}
	}
	if labelled < 2 { // a narrow range: label every tick
		for i := range out {
			out[i].Label = strconv.FormatFloat(out[i].Value, 'g', 3, 64)
		}
	}
	return out
}

// save writes the panels side by side as name.png and name.svg (8 inches
// wide for one panel, 12 for more) and returns the files written.
func save(dir, name string, panels ...*plot.Plot) ([]string, error) {
	if len(panels) == 0 {
		return nil, nil
	}
	width := 8 * vg.Inch
	if len(panels) > 1 {
		width = 12 * vg.Inch
	}
	var files []string
	for _, ext := range []string{"png", "svg"} {
		f := filepath.Join(dir, name+"."+ext)
		if err := savePanels(f, ext, width, 4*vg.Inch, panels); err != nil {
			return files, fmt.Errorf("report: save %s: %w", f, err)
		}
		files = append(files, f)
	}
	return files, nil
}

func savePanels(path, format string, w, h vg.Length, panels []*plot.Plot) error {
	c, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return err
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Points(12), PadTop: vg.Points(4), PadBottom: vg.Points(4)}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, draw.New(c))
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
