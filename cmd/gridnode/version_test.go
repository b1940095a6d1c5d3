package main

import (
	"bytes"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestVersion: gridnode version names the build and the Go version it was
// built with, and exits 0.
func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "gridnode "+version) || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("%q, want the version %q and Go %s", out, version, runtime.Version())
	}
}

// TestHelpExitsZero: -h (and --help) of every command prints its usage and
// exits 0; only a command line it cannot run is an error.
func TestHelpExitsZero(t *testing.T) {
	cmds := [][]string{{"serve"}, {"demo"}, {"config"}, {"config", "print"}, {"config", "validate"},
		{"gossip-key"}, {"gossip-key", "list"}, {"token-hash"}, {"gossip-keygen"}}
	for _, v := range cliVerbs() {
		cmds = append(cmds, []string{v})
	}
	for _, cmd := range cmds {
		for _, h := range []string{"-h", "--help"} {
			var stdout, stderr bytes.Buffer
			if code := run(append(slices.Clone(cmd), h), &stdout, &stderr); code != 0 {
				t.Errorf("gridnode %s %s: exit %d, want 0 (stderr %q)", strings.Join(cmd, " "), h, code, stderr.String())
			}
			if stdout.Len()+stderr.Len() == 0 {
				t.Errorf("gridnode %s %s printed no usage", strings.Join(cmd, " "), h)
			}
		}
	}
}
