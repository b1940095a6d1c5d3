package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cliProc runs the gridnode CLI as its own process (the test binary
// re-executed as gridnode) and returns its exit code and outputs.
func cliProc(t *testing.T, verb string, args ...string) (int, string, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, append([]string{verb}, args...)...)
	cmd.Env = append(os.Environ(), "GRIDNODE_EXEC=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("gridnode %s: %v\n%s", verb, err, stderr.String())
	return 0, "", ""
}

// TestCLILeaseRules: against a real single-node gridnode process, through
// the CLI run as processes: reserve --request-id X twice answers ACQUIRED
// both times with the same token (before request ids the second answered
// BUSY); another consumer is BUSY; get on the PROCESSING key shows no
// token, in the table or in JSON, unless --show-token; an extend with a
// shorter lease keeps the deadline.
func TestCLILeaseRules(t *testing.T) {
	p := startServe(t, t.TempDir())
	base := []string{"--addr", p.addr, "--ns", "cli", "--key", "order-1"}
	run := func(verb string, args ...string) (int, string, string) {
		t.Helper()
		return cliProc(t, verb, append(append([]string(nil), base...), args...)...)
	}
	reserve := func(args ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := run("reserve", append([]string{"--json", "--lease", "1m"}, args...)...)
		if code != 0 {
			t.Fatalf("reserve %v: exit %d: %s", args, code, stderr)
		}
		return oneJSON(t, stdout)
	}

	first := reserve("--request-id", "X")
	again := reserve("--request-id", "X")
	if first["outcome"] != "ACQUIRED" || again["outcome"] != "ACQUIRED" || first["token"] == nil ||
		again["token"] != first["token"] || again["deadline"] != first["deadline"] || again["attempt"] != first["attempt"] {
		t.Fatalf("reserve --request-id X twice:\n%v\n%v\nwant ACQUIRED twice with one token and deadline", first, again)
	}
	if other := reserve("--request-id", "Y"); other["outcome"] != "BUSY" || other["token"] != float64(0) {
		t.Fatalf("reserve with another request id: %v, want BUSY and token 0", other)
	}
	tok := strconv.FormatUint(uint64(first["token"].(float64)), 10)

	code, stdout, stderr := run("get")
	if code != 0 || !strings.Contains(stdout, "PROCESSING") || strings.Contains(stdout, "TOKEN") || strings.Contains(stdout, tok) {
		t.Fatalf("get (table) of a PROCESSING key: exit %d, want no token:\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = run("get", "--json")
	if m := oneJSON(t, stdout); code != 0 || m["state"] != "PROCESSING" || m["token"] != nil {
		t.Fatalf("get --json of a PROCESSING key: exit %d %v, want no token", code, m)
	}
	code, stdout, _ = run("get", "--json", "--show-token")
	if m := oneJSON(t, stdout); code != 0 || m["token"] != first["token"] {
		t.Fatalf("get --show-token: exit %d %v, want token %s", code, m, tok)
	}
	code, stdout, _ = run("get", "--show-token", "--stale-ok")
	if code != 0 || !strings.Contains(stdout, "TOKEN") || !strings.Contains(stdout, tok) {
		t.Fatalf("get --show-token --stale-ok (table): exit %d\n%s", code, stdout)
	}

	code, stdout, stderr = run("extend", "--json", "--token", tok, "--lease", "1s")
	if m := oneJSON(t, stdout); code != 0 || m["outcome"] != "OK" || m["deadline"] != first["deadline"] {
		t.Fatalf("extend --lease 1s of a 1m lease: exit %d %v %s, want the deadline %v kept", code, m, stderr, first["deadline"])
	}

	code, _, stderr = run("reserve", "--request-id", strings.Repeat("x", 65))
	if code != 1 || !strings.Contains(stderr, "limit 64") {
		t.Fatalf("reserve with a 65-byte request id: exit %d: %s", code, stderr)
	}
}
