package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// metricName finds the grid's metric names in expressions and source.
var metricName = regexp.MustCompile(`l4xg_grid_[a-z0-9_]+`)

// exportedMetrics are the metric names the module's code defines (every
// "l4xg_grid_*" string of its non-test Go files), with the series a
// histogram adds.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range regexp.MustCompile(`"(l4xg_grid_[a-z0-9_]+)"`).FindAllSubmatch(b, -1) {
			n := string(m[1])
			names[n] = true
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[n+s] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 40 {
		t.Fatalf("found only %d metric names in the module", len(names))
	}
	return names
}

// TestDashboard: the dashboard is JSON with its stable uid, a datasource
// variable every panel uses, the rows for cluster, shards, Raft, tiers and
// clients, and only metrics the grid exports.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/l4xg-grid.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct{ Name, Type string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type, Title, Description string
			Datasource               *struct{ UID string }   `json:"datasource"`
			Targets                  []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID != "l4xg-grid" {
		t.Errorf("uid %q, want the stable l4xg-grid", d.UID)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		hasDS = hasDS || (v.Name == "datasource" && v.Type == "datasource")
	}
	if !hasDS {
		t.Error("no datasource variable")
	}
	exported := exportedMetrics(t)
	rows := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows[p.Title] = true
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		if p.Description == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q has no description or no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				if !exported[m] {
					t.Errorf("panel %q queries %s, which the grid does not export", p.Title, m)
				}
			}
		}
	}
	for _, r := range []string{"Cluster", "Shards", "Raft", "Tiers", "Clients"} {
		if !rows[r] {
			t.Errorf("no %q row", r)
		}
	}
}

// TestAlertMetricsExist: every metric the alert rules read is one the grid
// exports (promtool checks the syntax, not the names).
func TestAlertMetricsExist(t *testing.T) {
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	exported := exportedMetrics(t)
	for _, m := range metricName.FindAllString(string(b), -1) {
		if !exported[m] {
			t.Errorf("alerts.yml reads %s, which the grid does not export", m)
		}
	}
}
