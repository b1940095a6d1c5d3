package main

import (
	"encoding/json"
	"fmt"
	"html/template"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/l4xg/grid/chaos/check"
)

// summary is summary.json: the contract scripts rely on (verdict, seed,
// faults and each check's figures).
type summary struct {
	Verdict  string    `json:"verdict"` // PASS or FAIL
	Seed     uint64    `json:"seed"`
	Replay   string    `json:"replay"`
	Nodes    int       `json:"nodes"`
	Replicas int       `json:"replicas"`
	Shards   int       `json:"shards"`
	Duration string    `json:"duration"`
	Workload string    `json:"workload"`
	Broken   string    `json:"broken,omitempty"`
	Faults   []made    `json:"faults"`
	Schedule []planned `json:"schedule"`
	Checks   []result  `json:"checks"`
	Seconds  float64   `json:"seconds"`
	// Visualization is porcupine's page of the failing keys, if any.
	Visualization string `json:"visualization,omitempty"`
}

// bucket is one second of the timeline.
type bucket struct {
	ok, errs, register int
	lat                []time.Duration
}

// replay is the command line that replays cfg's schedule.
func replay(c config) string {
	s := fmt.Sprintf("go run ./chaos run --nodes %d --replicas %d --shards %d --duration %v --fault-every %v --workload %s --seed %d --faults %s",
		c.Nodes, c.Replicas, c.Shards, c.Duration, c.FaultEvery, c.Workload, c.Seed, joinOr(c.Faults, "none"))
	if c.Broken != "" {
		s += " --broken " + c.Broken
	}
	return s
}

func joinOr(s []string, none string) string {
	if len(s) == 0 {
		return none
	}
	out := s[0]
	for _, x := range s[1:] {
		out += "," + x
	}
	return out
}

// writeReport writes summary.json, history.json, the plots and
// report.html into o.cfg.Out.
func writeReport(o *outcome) error {
	dir := o.cfg.Out
	verdict := "FAIL"
	if o.verdict {
		verdict = "PASS"
	}
	sum := summary{Verdict: verdict, Seed: o.cfg.Seed, Replay: replay(o.cfg), Nodes: o.cfg.Nodes, Replicas: o.cfg.Replicas,
		Shards: o.cfg.Shards, Duration: o.cfg.Duration.String(), Workload: o.cfg.Workload, Broken: o.cfg.Broken,
		Faults: o.faults, Schedule: o.schedule, Checks: o.checks, Seconds: o.elapsed.Seconds(), Visualization: o.viz}
	if sum.Faults == nil {
		sum.Faults = []made{}
	}
	if err := writeJSON(filepath.Join(dir, "summary.json"), sum); err != nil {
		return err
	}
	if err := writeHistory(filepath.Join(dir, "history.json"), o); err != nil {
		return err
	}
	buckets := timeline(o)
	if err := plots(dir, o, buckets); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return err
	}
	defer f.Close()
	return page.Execute(f, struct {
		summary
		Pass bool
	}{sum, o.verdict})
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// writeHistory writes the register history (call and return in ns from
// the start of the load; an unknown outcome has no return) and the app
// workload's samples.
func writeHistory(path string, o *outcome) error {
	type op struct {
		Client int          `json:"client"`
		Call   int64        `json:"call"`
		Return *int64       `json:"return,omitempty"`
		Input  check.Input  `json:"input"`
		Output check.Output `json:"output"`
		Note   any          `json:"note,omitempty"`
	}
	ops := make([]op, 0, len(o.history))
	for _, h := range o.history {
		x := op{Client: h.ClientId, Call: h.Call, Input: h.Input.(check.Input), Output: h.Output.(check.Output), Note: h.Metadata}
		if !x.Output.Unknown {
			ret := h.Return
			x.Return = &ret
		}
		ops = append(ops, x)
	}
	slices.SortFunc(ops, func(a, b op) int { return int(a.Call - b.Call) })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return json.NewEncoder(f).Encode(map[string]any{"register": ops, "app": o.samples, "faults": o.faults})
}

// timeline cuts the run into seconds.
func timeline(o *outcome) []bucket {
	n := int(o.cfg.Duration/time.Second) + 1
	for _, s := range o.samples {
		n = max(n, int(s.End/time.Second)+1)
	}
	b := make([]bucket, n)
	for _, s := range o.samples {
		i := int(s.End / time.Second)
		if s.Err != "" {
			b[i].errs++
			continue
		}
		b[i].ok++
		b[i].lat = append(b[i].lat, s.End-s.Start)
	}
	for _, h := range o.history {
		if i := int(time.Duration(h.Call) / time.Second); i >= 0 && i < n {
			b[i].register++
		}
	}
	return b
}

// pct is the p-th percentile of ds (sorted in place), 0 when empty.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(p*float64(len(ds))))]
}

// plots writes throughput.png, latency.png and errors.png: each a line
// over the run's seconds, the faults shaded.
func plots(dir string, o *outcome, b []bucket) error {
	series := func(f func(bucket) float64) plotter.XYs {
		xy := make(plotter.XYs, len(b))
		for i := range b {
			xy[i].X, xy[i].Y = float64(i), f(b[i])
		}
		return xy
	}
	type line struct {
		name string
		xy   plotter.XYs
		c    color.RGBA
	}
	mk := func(name, title, ylabel string, lines []line) error {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, "seconds from the start of the load", ylabel
		top := 1.0
		for _, l := range lines {
			for _, v := range l.xy {
				top = max(top, v.Y)
			}
		}
		for _, f := range o.faults {
			x0, x1 := f.Start.Seconds(), f.End.Seconds()
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: top}, {X: x0, Y: top}})
			if err != nil {
				return err
			}
			poly.Color = color.RGBA{R: 255, G: 200, B: 200, A: 255}
			poly.LineStyle.Width = 0
			p.Add(poly)
		}
		for _, l := range lines {
			ln, err := plotter.NewLine(l.xy)
			if err != nil {
				return err
			}
			ln.Color = l.c
			p.Add(ln)
			p.Legend.Add(l.name, ln)
		}
		p.Legend.Top = true
		return p.Save(28*vg.Centimeter, 10*vg.Centimeter, filepath.Join(dir, name+".png"))
	}
	blue, green, red, grey := color.RGBA{B: 200, A: 255}, color.RGBA{G: 150, A: 255}, color.RGBA{R: 200, A: 255}, color.RGBA{R: 90, G: 90, B: 90, A: 255}
	if err := mk("throughput", "Throughput (faults shaded)", "operations/s", []line{
		{"app (consumers)", series(func(b bucket) float64 { return float64(b.ok) }), blue},
		{"register (checked)", series(func(b bucket) float64 { return float64(b.register) }), green},
	}); err != nil {
		return err
	}
	if err := mk("latency", "App latency per second (faults shaded)", "ms", []line{
		{"p50", series(func(b bucket) float64 { return pct(b.lat, 0.5).Seconds() * 1000 }), green},
		{"p99", series(func(b bucket) float64 { return pct(b.lat, 0.99).Seconds() * 1000 }), blue},
		{"max", series(func(b bucket) float64 { return pct(b.lat, 1).Seconds() * 1000 }), grey},
	}); err != nil {
		return err
	}
	return mk("errors", "App errors per second (faults shaded)", "errors/s", []line{
		{"errors", series(func(b bucket) float64 { return float64(b.errs) }), red},
	})
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"dur": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>L4XG Grid chaos run: {{.Verdict}}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
.verdict{font-size:2em;font-weight:bold;padding:.3em .6em;border-radius:6px;display:inline-block}
.PASS{background:#d8f5d0;color:#1a5e12}.FAIL{background:#fbd5d5;color:#8a1010}
table{border-collapse:collapse;width:100%;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}code{background:#f3f3f3;padding:0 .2em}img{max-width:100%}
.bad{color:#8a1010;font-weight:bold}
</style></head><body>
<h1>Chaos run</h1>
<p><span class="verdict {{.Verdict}}">{{.Verdict}}</span></p>
<p>Seed {{.Seed}}: {{.Nodes}} nodes, {{.Replicas}} replicas, {{if .Shards}}{{.Shards}}{{else}}gridnode's default count of{{end}} shards, {{.Duration}}, workload {{.Workload}}{{if .Broken}}, <b>deliberately broken grid: {{.Broken}}</b>{{end}}. Replay with <code>{{.Replay}}</code>.</p>
<h2>Checks</h2>
<table><tr><th>check</th><th>result</th><th>key</th><th>detail</th></tr>
{{range .Checks}}<tr><td>{{.Name}}{{if not .Safety}} (measurement){{end}}</td><td class="{{if not .Pass}}bad{{end}}">{{if .Pass}}pass{{else}}FAIL{{end}}</td><td>{{.Key}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>
{{if .Visualization}}<p class="bad">Porcupine's visualization of the failing keys: <a href="{{.Visualization}}">{{.Visualization}}</a></p>{{end}}
<h2>Timeline</h2>
<p>Faults are shaded, from their start until they were undone.</p>
<img src="throughput.png" alt="throughput"><img src="latency.png" alt="latency"><img src="errors.png" alt="errors">
<h2>Faults</h2>
<table><tr><th>#</th><th>fault</th><th>target</th><th>start</th><th>undone</th><th>converged after</th><th>consumers blocked (max)</th><th>notes</th></tr>
{{range $i, $f := .Faults}}<tr><td>{{$i}}</td><td>{{$f.Kind}}/{{$f.Variant}}{{if $f.Offset}} {{dur $f.Offset}}{{end}}</td><td>{{$f.Target}}</td><td>{{dur $f.Start}}</td><td>{{dur $f.End}}</td><td>{{dur $f.Settled}}</td><td>{{dur $f.Unavailable}}</td><td>{{$f.Err}} {{$f.Unstable}}</td></tr>
{{end}}</table>
<p>Files: <a href="summary.json">summary.json</a>, <a href="history.json">history.json</a>, <a href="events.log">events.log</a>, the nodes' logs in <a href="nodes/">nodes/</a>.</p>
</body></html>
`))
