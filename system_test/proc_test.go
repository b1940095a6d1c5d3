package system_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/internal/gridproc"
)

// procNode is the Cluster of one gridnode serve process: Kill is a real
// SIGKILL, so writes the node acknowledged must have been fsync'd.
type procNode struct {
	t    *testing.T
	bin  string
	dir  string
	addr string         // fixed after the first start
	args []string       // more serve flags
	proc *gridproc.Proc // nil while stopped
}

var _ check.Cluster = (*procNode)(nil)

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
	if p.proc == nil {
		return
	}
	_ = p.proc.Signal(sig)
	<-p.proc.Exited()
	p.proc = nil
}

func (p *procNode) start() {
	t := p.t
	args := append([]string{p.bin, "serve", "--data-dir", p.dir, "--shards", "2",
		"--listen", p.addr, "--http-listen", "", "--log-level", "error"}, p.args...)
	proc, err := gridproc.Start(gridproc.Options{Argv: args, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	a, err := proc.WaitReady(context.Background(), 60*time.Second)
	if err != nil {
		proc.Kill()
		t.Fatalf("gridnode: %v", err)
	}
	p.addr, p.proc = a.GRPC, proc
}

// buildGridnode builds the gridnode binary into a temporary directory.
func buildGridnode(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := gridproc.BuildGridnode(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
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
			if st := check.Count(ops); len(args) > 0 && st.Cold == 0 {
				t.Errorf("no answer came from the cold tier with %q", args)
			}
			checkHistory(t, "kill9", ops, porcupine.Ok)
		})
	}
}
