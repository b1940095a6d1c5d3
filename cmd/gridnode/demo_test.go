//go:build linux

package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4xg/grid/internal/testwait"
)

// TestDemo: gridnode demo --nodes 3 --logs comes up and says so, gridnode
// status against it shows three active nodes, and a Ctrl-C (SIGINT to its
// process group, as a terminal sends it) stops it with exit 0, every node
// having stopped cleanly, no node process left and not one error in the
// nodes' logs: the nodes stop together, so each sees its peers go away
// while it stops itself, which is no failure (before, 50 to 230 lines of
// Raft's "failed to appendEntries to" and "failed to heartbeat to", and
// memberlist's writes to its own closed socket).
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "demo")
	base := demoBasePort(t, 3)
	cmd := exec.Command(os.Args[0], "demo", "--nodes", "3", "--base-port", fmt.Sprint(base), "--data-dir", dir, "--logs")
	cmd.Env = append(os.Environ(), "GRIDNODE_EXEC=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group of its own, like a shell job
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for range lines {
		}
		for _, pid := range nodePids(dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	running := false
	timeout := time.After(90 * time.Second)
	for !running {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("demo exited before it was running: %v\n%s", <-exited, stderr.String())
			}
			running = strings.HasPrefix(l, "a 3-node grid is running")
		case <-timeout:
			t.Fatalf("demo not running within 90s\n%s", stderr.String())
		}
	}
	if pids := nodePids(dir); len(pids) != 3 {
		t.Fatalf("%d node processes run, want 3", len(pids))
	}

	addr := fmt.Sprintf("127.0.0.1:%d", base)
	var stdout string
	testwait.For(t, 30*time.Second, "status showing 3 active nodes, alive and ready", func() bool {
		var code int
		code, stdout, _ = cli(t, "status", "--addr", addr)
		return code == 0 && strings.Count(stdout, "  active  yes    yes  ") == 3
	}, func() string { return stdout })
	for i := range 3 {
		if !strings.Contains(stdout, fmt.Sprintf("node-%d  active  yes    yes    127.0.0.1:%d", i+1, base+10*i)) {
			t.Fatalf("status shows no row for node-%d:\n%s", i+1, stdout)
		}
	}

	// Ctrl-C.
	before := len(stderr.String())
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest := ""
	for l := range lines {
		rest += l + "\n"
	}
	select {
	case err := <-exited:
		if err != nil || !strings.Contains(rest, "stopping") {
			t.Fatalf("demo after SIGINT: %v, stdout %q\n%s", err, rest, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not exit within 60s of SIGINT")
	}
	if pids := nodePids(dir); len(pids) != 0 {
		t.Fatalf("node processes %v still run after the demo exited", pids)
	}
	stop := stderr.String()[before:]
	for i := range 3 {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^node-%d .* msg=stopped$`, i+1)).MatchString(stop) {
			t.Fatalf("the log (--logs) after SIGINT lacks node-%d's stopped line:\n%s", i+1, stop)
		}
	}
	if errs := errorLines(stop); len(errs) > 0 {
		t.Errorf("%d error lines in the nodes' logs after SIGINT, want none:\n%s", len(errs), strings.Join(errs, "\n"))
	}
}

// errorLines are the lines of a log at error level: slog's (text or JSON)
// and memberlist's or hclog's tags.
func errorLines(log string) []string {
	var errs []string
	for l := range strings.Lines(log) {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, `"level":"ERROR"`) ||
			strings.Contains(l, "[ERR]") || strings.Contains(l, "[ERROR]") {
			errs = append(errs, strings.TrimSuffix(l, "\n"))
		}
	}
	return errs
}

// TestPrefixWriter: every line of a node's log gets the prefix, however
// the pipe cuts it into writes, and a line comes out whole or not at all.
func TestPrefixWriter(t *testing.T) {
	for _, tc := range []struct {
		writes []string
		want   []string // what each write passes on
	}{
		{[]string{"a\n"}, []string{"n1 a\n"}},
		{[]string{"a\nb\n"}, []string{"n1 a\nn1 b\n"}},
		{[]string{"a\nb", "c\n"}, []string{"n1 a\n", "n1 bc\n"}},
		{[]string{"a", "b", "\nc\n"}, []string{"", "", "n1 ab\nn1 c\n"}},
		{[]string{"\n", "x"}, []string{"n1 \n", ""}},
	} {
		var out syncBuffer
		p := &prefixWriter{w: &out, prefix: "n1 "}
		for i, w := range tc.writes {
			before := out.String()
			if n, err := p.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("%q: Write(%q) = %d, %v", tc.writes, w, n, err)
			}
			if got := strings.TrimPrefix(out.String(), before); got != tc.want[i] {
				t.Errorf("%q: write %d passed on %q, want %q", tc.writes, i, got, tc.want[i])
			}
		}
	}
}

// demoBasePort picks a base port whose nodes' ports (4 per node, 10 apart)
// are free for TCP and UDP now, below Linux's ephemeral range.
func demoBasePort(t *testing.T, nodes int) int {
	t.Helper()
	for range 50 {
		base := 20000 + 10*rand.IntN(1000)
		free := true
		for i := range nodes {
			for off := range 4 {
				if !portFree(base + 10*i + off) {
					free = false
				}
			}
		}
		if free {
			return base
		}
	}
	t.Fatal("no free range of ports for the demo")
	return 0
}

func portFree(port int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	lis.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

// nodePids lists the processes whose command line names a data directory
// under dir: the demo's nodes (Linux /proc; none elsewhere).
func nodePids(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && args[1] == "serve" && strings.Contains(string(b), "\x00"+dir+string(filepath.Separator)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
