package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

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
	Addr     string // gRPC
	HTTPAddr string // /metrics, /debug/pprof when Pprof
	exited   chan struct{}
	exitErr  error
}

// GridnodeOptions of StartGridnode.
type GridnodeOptions struct {
	Bin    string
	Shards int // 0: the binary's default
	Pprof  bool
	// Stderr receives the node's log (warnings and errors); nil discards it.
	Stderr io.Writer
}

// StartGridnode starts a node on loopback ports with a fresh data directory
// and waits for its "ready:" lines.
func StartGridnode(ctx context.Context, o GridnodeOptions) (*Gridnode, error) {
	dir, err := os.MkdirTemp("", "bench-gridnode-")
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "warn"}
	if o.Shards > 0 {
		args = append(args, "--shards", fmt.Sprint(o.Shards))
	}
	if o.Pprof {
		args = append(args, "--pprof")
	}
	cmd := exec.Command(o.Bin, args...)
	cmd.Stderr = o.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("launch: start gridnode: %w", err)
	}
	g := &Gridnode{cmd: cmd, dir: dir, exited: make(chan struct{})}
	type addrs struct{ grpc, http string }
	ready := make(chan addrs, 1)
	go func() {
		var a addrs
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if h, ok := strings.CutPrefix(line, "ready: http "); ok {
				a.http = h
			}
			if h, ok := strings.CutPrefix(line, "ready: grpc "); ok {
				a.grpc = h
				ready <- a
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		g.exitErr = cmd.Wait()
		close(g.exited)
	}()
	t := time.NewTimer(60 * time.Second)
	defer t.Stop()
	select {
	case a := <-ready:
		g.Addr, g.HTTPAddr = a.grpc, a.http
		return g, nil
	case <-g.exited:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("launch: gridnode exited before ready: %v", g.exitErr)
	case <-t.C:
		err = errors.New("launch: gridnode not ready within 60s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.Stop()
	return nil, err
}

// PID of the node.
func (g *Gridnode) PID() int { return g.cmd.Process.Pid }

// Stop sends SIGTERM, kills the node if it has not exited within 20 s, and
// removes its data directory.
func (g *Gridnode) Stop() {
	stopProcess(g.cmd, g.exited, 20*time.Second)
	os.RemoveAll(g.dir)
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
