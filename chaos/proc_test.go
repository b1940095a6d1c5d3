package chaos_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos"
)

// procNode is the Cluster of one gridnode serve process: Kill is a real
// SIGKILL, so writes the node acknowledged must have been fsync'd.
type procNode struct {
	t    *testing.T
	bin  string
	dir  string
	addr string   // fixed after the first start
	args []string // more serve flags
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
}

var _ chaos.Cluster = (*procNode)(nil)

func startProc(t *testing.T, bin string, args ...string) *procNode {
	p := &procNode{t: t, bin: bin, dir: t.TempDir(), addr: "127.0.0.1:0", args: args}
	p.start()
	t.Cleanup(func() { p.stop(syscall.SIGKILL) })
	return p
}

func (p *procNode) Addrs() []string { return []string{p.addr} }

func (p *procNode) Kill(int) { p.stop(syscall.SIGKILL) }

func (p *procNode) Restart(int) {
	p.stop(syscall.SIGTERM)
	p.start()
}

func (p *procNode) stop(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	<-p.exit
	p.cmd = nil
}

func (p *procNode) start() {
	t := p.t
	args := append([]string{"serve", "--data-dir", p.dir, "--shards", "2",
		"--listen", p.addr, "--http-listen", "", "--log-level", "error"}, p.args...)
	cmd := exec.Command(p.bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "ready: grpc "); ok {
				ready <- addr
			}
		}
	}()
	exit := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exit)
	}()
	select {
	case p.addr = <-ready:
	case <-exit:
		t.Fatalf("gridnode exited before ready")
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exit
		t.Fatal("gridnode not ready within 60s")
	}
	p.cmd, p.exit = cmd, exit
}

// buildGridnode builds the gridnode binary into a temporary directory.
func buildGridnode(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gridnode")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/l4xg/grid/cmd/gridnode").CombinedOutput()
	if err != nil {
		t.Fatalf("go build gridnode: %v\n%s", err, out)
	}
	return bin
}

// TestLinearizableUnderKill9: the restart workload against a gridnode
// process (fsync'd Raft log) that is killed with SIGKILL or stopped with
// SIGTERM and started again during the run; every other seed with a hot
// window of 200 ms, so that settled records are read from the cold tier.
// Runs with -long or -chaos.proc.
func TestLinearizableUnderKill9(t *testing.T) {
	if !*long && !*procTest {
		t.Skip("starts processes: run with -long or -chaos.proc")
	}
	bin := buildGridnode(t)
	seeds, w := 3, workload{workers: 16, clients: 4, keys: 10, ops: 10000, faults: 10}
	s := firstSeed(t)
	for i := range seeds {
		w.seed = s + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", w.seed), func(t *testing.T) {
			var args []string
			w := w
			if i%2 == 1 {
				w.forgets = 1 // settled records live long enough to move
				// Settled records move to the cold tier within moments:
				// duplicates and Gets are answered from Pebble, across
				// restarts.
				args = []string{"--hot-window", "200ms"}
			}
			t.Logf("serve flags %q", args)
			ops := run(t, startProc(t, bin, args...), w)
			if st := chaos.Count(ops); len(args) > 0 && st.Cold == 0 {
				t.Errorf("no answer came from the cold tier with %q", args)
			}
			checkHistory(t, "kill9", ops, porcupine.Ok)
		})
	}
}
