package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/l4xg/grid/internal/gridproc"
)

// readyTimeout bounds the wait for a node's "ready: grpc" line.
const readyTimeout = 60 * time.Second

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
	p        *gridproc.Proc
	dir      string
	bin      string
	args     []string
	env      []string // more environment variables; nil: this process's environment
	stderr   io.Writer
	ID       string // --node-id; "" for a standalone node
	Addr     string // gRPC
	HTTPAddr string // /metrics, /debug/pprof when Pprof
}

// GridnodeOptions of StartGridnode.
type GridnodeOptions struct {
	Bin    string
	Shards int // 0: the binary's default
	Pprof  bool
	// Flags are more flags of gridnode serve (soft settings to measure).
	Flags []string
	// Stderr receives the node's log (warnings and errors); nil discards it.
	Stderr io.Writer
	// Env are more environment variables of the node (OTEL_* to trace it).
	Env []string
}

// StartGridnode starts a standalone node on loopback ports with a fresh data
// directory and waits for its "ready:" lines.
func StartGridnode(ctx context.Context, o GridnodeOptions) (*Gridnode, error) {
	dir, err := os.MkdirTemp("", "bench-gridnode-")
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-level", "warn"}
	args = append(args, commonArgs(o.Shards, o.Pprof, o.Flags)...)
	g, err := spawn(o.Bin, args, o.Env, dir, o.Stderr)
	if err != nil {
		return nil, err
	}
	if err := g.waitReady(ctx, readyTimeout); err != nil {
		g.Stop()
		return nil, err
	}
	return g, nil
}

func commonArgs(shards int, pprof bool, flags []string) []string {
	args := slices.Clone(flags)
	if shards > 0 {
		args = append(args, "--shards", fmt.Sprint(shards))
	}
	if pprof {
		args = append(args, "--pprof")
	}
	return args
}

// spawn starts bin with args; dir is the node's data directory, removed at
// Stop (and now, if the start fails).
func spawn(bin string, args, env []string, dir string, stderr io.Writer) (*Gridnode, error) {
	g := &Gridnode{dir: dir, bin: bin, args: args, env: env, stderr: stderr}
	if err := g.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return g, nil
}

// start starts the node's process.
func (g *Gridnode) start() error {
	var env []string
	if g.env != nil {
		env = append(os.Environ(), g.env...)
	}
	p, err := gridproc.Start(gridproc.Options{
		Argv: append([]string{g.bin}, g.args...), Stderr: g.stderr, Env: env,
		// If the benchmark dies without stopping its children (kill -9, a
		// crash), the kernel sends them SIGTERM: no node outlives the run.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM},
	})
	if err != nil {
		return fmt.Errorf("launch: start gridnode: %w", err)
	}
	g.p = p
	return nil
}

// waitReady waits for the node's "ready: grpc" line and records its
// addresses. It does not stop the node on failure.
func (g *Gridnode) waitReady(ctx context.Context, within time.Duration) error {
	a, err := g.p.WaitReady(ctx, within)
	switch {
	case errors.Is(err, gridproc.ErrExited):
		return fmt.Errorf("launch: gridnode %s exited before ready: %v", g.ID, g.p.Err())
	case errors.Is(err, gridproc.ErrNotReady):
		return fmt.Errorf("launch: gridnode %s not ready within %v", g.ID, within)
	case err != nil:
		return err
	}
	g.Addr, g.HTTPAddr = a.GRPC, a.HTTP
	return nil
}

// PID of the node.
func (g *Gridnode) PID() int { return g.p.PID() }

// Stop sends SIGTERM, kills the node if it has not exited within 20 s, and
// removes its data directory.
func (g *Gridnode) Stop() {
	g.p.Stop(20 * time.Second)
	os.RemoveAll(g.dir)
}

// Kill sends SIGKILL (kill -9) and waits for the process to end. The data
// directory stays, for Restart.
func (g *Gridnode) Kill() { g.p.Kill() }

// Restart starts the node again, after Kill, with its command line and data
// directory, and waits for its ready line. Its addresses stay the same
// (the command line names the ports).
func (g *Gridnode) Restart(ctx context.Context) error {
	if err := g.start(); err != nil {
		return err
	}
	return g.waitReady(ctx, readyTimeout)
}

// Exited reports whether the node's process has ended.
func (g *Gridnode) Exited() bool {
	select {
	case <-g.p.Exited():
		return true
	default:
		return false
	}
}
