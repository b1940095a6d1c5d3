// Package deploy holds no code: its tests check the deployment files
// (alert rules, manifests) with the tools that consume them.
package deploy

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// needTool returns the path of a command-line tool, or skips the test
// naming the missing tool; with GRID_TEST_TOOLS=required (CI) a missing
// tool fails the test instead.
func needTool(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("GRID_TEST_TOOLS") == "required" {
		t.Fatalf("%s is required (GRID_TEST_TOOLS=required) and not installed: %s", name, install)
	}
	t.Skipf("%s is not installed (%s)", name, install)
	return ""
}

// TestAlertRules: the alert rules parse (promtool check rules) and each
// alert fires on the series its unit tests give, with its labels and
// annotations, and not before its "for" (promtool test rules).
func TestAlertRules(t *testing.T) {
	promtool := needTool(t, "promtool", "apt-get install prometheus")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
