package launch

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// readyTimeout bounds the wait for a node's "ready: grpc" line.
const readyTimeout = 60 * time.Second

// BuildGridnode builds ./cmd/gridnode of the module in moduleDir into dir
// and returns the binary's path.
func BuildGridnode(ctx context.Context, moduleDir, dir string) (string, error) {
	bin := filepath.Join(dir, "gridnode")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/gridnode")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("launch: go build ./cmd/gridnode: %w\n%s", err, out)
	}
	return bin, nil
}

// ModuleDir finds the directory of the module that holds ./cmd/gridnode,
// from dir upwards.
func ModuleDir(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "cmd", "gridnode", "serve.go")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("launch: no cmd/gridnode above %s", dir)
		}
	}
}

// Gridnode is a running "gridnode serve" child.
type Gridnode struct {
	cmd      *exec.Cmd
	dir      string
	ID       string // --node-id; "" for a standalone node
	Addr     string // gRPC
	HTTPAddr string // /metrics, /debug/pprof when Pprof
	ready    chan readyAddrs
	exited   chan struct{}
	exitErr  error
}

type readyAddrs struct{ grpc, http string }

// GridnodeOptions of StartGridnode.
type GridnodeOptions struct {
	Bin    string
	Shards int // 0: the binary's default
	Pprof  bool
	// Stderr receives the node's log (warnings and errors); nil discards it.
	Stderr io.Writer
}

// StartGridnode starts a standalone node on loopback ports with a fresh data
// directory and waits for its "ready:" lines.
func StartGridnode(ctx context.Context, o GridnodeOptions) (*Gridnode, error) {
	dir, err := os.MkdirTemp("", "bench-gridnode-")
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "warn"}
	args = append(args, commonArgs(o.Shards, o.Pprof)...)
	g, err := spawn(o.Bin, args, dir, o.Stderr)
	if err != nil {
		return nil, err
	}
	if err := g.waitReady(ctx, readyTimeout); err != nil {
		g.Stop()
		return nil, err
	}
	return g, nil
}

func commonArgs(shards int, pprof bool) []string {
	var args []string
	if shards > 0 {
		args = append(args, "--shards", fmt.Sprint(shards))
	}
	if pprof {
		args = append(args, "--pprof")
	}
	return args
}

// spawn starts bin with args; dir is the node's data directory, removed at
// Stop (and now, if the start fails). The node's stdout is scanned for its
// ready lines.
func spawn(bin string, args []string, dir string, stderr io.Writer) (*Gridnode, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stderr = stderr
	// If the benchmark dies without stopping its children (kill -9, a
	// crash), the kernel sends them SIGTERM: no node outlives the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("launch: start gridnode: %w", err)
	}
	g := &Gridnode{cmd: cmd, dir: dir, ready: make(chan readyAddrs, 1), exited: make(chan struct{})}
	go func() {
		var a readyAddrs
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if h, ok := strings.CutPrefix(line, "ready: http "); ok {
				a.http = h
			}
			if h, ok := strings.CutPrefix(line, "ready: grpc "); ok {
				a.grpc = h
				select {
				case g.ready <- a:
				default: // a second ready line: the first one counts
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		g.exitErr = cmd.Wait()
		close(g.exited)
	}()
	return g, nil
}

// waitReady waits for the node's "ready: grpc" line and records its
// addresses. It does not stop the node on failure.
func (g *Gridnode) waitReady(ctx context.Context, within time.Duration) error {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case a := <-g.ready:
		g.Addr, g.HTTPAddr = a.grpc, a.http
		return nil
	case <-g.exited:
		return fmt.Errorf("launch: gridnode %s exited before ready: %v", g.ID, g.exitErr)
	case <-t.C:
		return fmt.Errorf("launch: gridnode %s not ready within %v", g.ID, within)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PID of the node.
func (g *Gridnode) PID() int { return g.cmd.Process.Pid }

// Stop sends SIGTERM, kills the node if it has not exited within 20 s, and
// removes its data directory.
func (g *Gridnode) Stop() {
	stopProcess(g.cmd, g.exited, 20*time.Second)
	os.RemoveAll(g.dir)
}

// Exited reports whether the node's process has ended.
func (g *Gridnode) Exited() bool {
	select {
	case <-g.exited:
		return true
	default:
		return false
	}
}

func stopProcess(cmd *exec.Cmd, exited <-chan struct{}, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		_ = cmd.Process.Kill()
		<-exited
	}
}
