package gridproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The prefixes of the ready lines, each followed by an address.
const (
	ReadyGRPC = "ready: grpc "
	ReadyHTTP = "ready: http "
)

var (
	// ErrExited is returned by WaitReady when the process ended before its
	// ready line.
	ErrExited = errors.New("gridproc: exited before ready")
	// ErrNotReady is returned by WaitReady when no ready line came in time.
	ErrNotReady = errors.New("gridproc: not ready")
)

// Options of Start.
type Options struct {
	// Argv is the command line: the program and its arguments. The program
	// may be a prefix that execs the server in place (as "ip netns exec NS"
	// does), so that the process signalled is the server itself.
	Argv []string
	// Env is the process's environment; nil: this process's.
	Env []string
	// Stdout receives a copy of what the process prints on stdout, Stderr
	// its stderr; nil discards.
	Stdout, Stderr io.Writer
	// SysProcAttr of the process (a process group, a parent-death signal).
	SysProcAttr *syscall.SysProcAttr
}

// Addrs are the addresses a process printed in its ready lines.
type Addrs struct {
	GRPC string
	HTTP string // "" when it printed none
}

// Proc is a running child process.
type Proc struct {
	cmd    *exec.Cmd
	ready  chan struct{} // closed at the first grpc ready line; addrs is set then
	addrs  Addrs
	exited chan struct{} // closed when the process has exited; err is set then
	err    error
}

// Start starts the process. Its stdout is watched for the ready lines
// until it exits.
func Start(o Options) (*Proc, error) {
	if len(o.Argv) == 0 {
		return nil, errors.New("gridproc: no command")
	}
	p := &Proc{ready: make(chan struct{}), exited: make(chan struct{})}
	cmd := exec.Command(o.Argv[0], o.Argv[1:]...)
	cmd.Env = o.Env
	cmd.Stderr = o.Stderr
	cmd.SysProcAttr = o.SysProcAttr
	// exec copies stdout into the watch, and Wait returns only once it has
	// all been read: no line is lost to a pipe closed under its reader.
	cmd.Stdout = &readyWatch{p: p, copy: o.Stdout}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("gridproc: start %s: %w", o.Argv[0], err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Ready is closed once the process has printed its grpc ready line.
func (p *Proc) Ready() <-chan struct{} { return p.ready }

// Addrs are the ready lines' addresses, once Ready is closed.
func (p *Proc) Addrs() Addrs {
	<-p.ready
	return p.addrs
}

// WaitReady waits for the grpc ready line and returns the addresses. It
// fails with ErrExited when the process ends first, ErrNotReady after
// within, or ctx's error; it does not stop the process.
func (p *Proc) WaitReady(ctx context.Context, within time.Duration) (Addrs, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-p.ready:
		return p.addrs, nil
	case <-p.exited:
		return Addrs{}, fmt.Errorf("%w: %v", ErrExited, p.err)
	case <-t.C:
		return Addrs{}, fmt.Errorf("%w within %v", ErrNotReady, within)
	case <-ctx.Done():
		return Addrs{}, ctx.Err()
	}
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (exec.Cmd.Wait's error), once Exited is
// closed.
func (p *Proc) Err() error {
	<-p.exited
	return p.err
}

// PID of the process.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill kills the process (SIGKILL) and waits for it to exit; it may have
// exited already.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Stop sends SIGTERM, kills the process if it has not exited within grace,
// and returns once it has exited.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.Kill()
	}
}

// maxLine bounds the line a readyWatch keeps: no longer line is a ready
// line.
const maxLine = 4096

// readyWatch is a process's stdout: it copies it on and closes p.ready at
// the first grpc ready line.
type readyWatch struct {
	p    *Proc
	copy io.Writer // nil: none
	once sync.Once
	line []byte
	http string // from an http ready line before the grpc one
}

func (w *readyWatch) Write(b []byte) (int, error) {
	if w.copy != nil {
		// A failing copy must not stop the watch, nor the process's output.
		_, _ = w.copy.Write(b)
	}
	w.line = append(w.line, b...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		w.scan(string(w.line[:i]))
		w.line = w.line[i+1:]
	}
	if len(w.line) > maxLine {
		w.line = w.line[:0]
	}
	return len(b), nil
}

func (w *readyWatch) scan(line string) {
	if addr, ok := strings.CutPrefix(line, ReadyHTTP); ok {
		w.http = addr
	}
	if addr, ok := strings.CutPrefix(line, ReadyGRPC); ok {
		w.once.Do(func() {
			w.p.addrs = Addrs{GRPC: addr, HTTP: w.http}
			close(w.p.ready)
		})
	}
}

// BuildGridnode builds the gridnode binary (the module's cmd/gridnode) into
// dir and returns its path. moduleDir is a directory inside the module; ""
// means the working directory.
//
// It builds as deploy/docker/Dockerfile does, static (CGO_ENABLED=0) and
// with -trimpath: the tests and tools run the binary the image ships, and
// every test that builds one (the deployment tests' included) shares one
// set of compiled packages in the build cache.
func BuildGridnode(ctx context.Context, moduleDir, dir string) (string, error) {
	bin := filepath.Join(dir, "gridnode")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "github.com/l4xg/grid/cmd/gridnode")
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gridproc: go build cmd/gridnode: %w\n%s", err, out)
	}
	return bin, nil
}
