package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/l4xg/grid/internal/gridproc"
)

const (
	// demoReadyTimeout bounds the start of the demo's nodes.
	demoReadyTimeout = time.Minute
	// demoStopTimeout is how long the nodes may take to stop cleanly
	// before they are killed.
	demoStopTimeout = 30 * time.Second
)

// demo starts a local cluster of gridnode processes on loopback, prints how
// to reach it, and stops it at SIGINT or SIGTERM. Node i (from 1) listens on
// base+10*(i-1) (gRPC), +1 (Raft), +2 (gossip) and +3 (HTTP).
//
// The nodes run in their own process group, so that a Ctrl-C in the
// terminal reaches the demo only: it then stops each node with one SIGTERM
// (a node takes a second signal as "exit now", which would skip its clean
// shutdown). It exits 0 once every node has stopped cleanly.
func demo(args []string, stdout, stderr io.Writer) (code int) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		nodes    = fs.Int("nodes", 3, "how many nodes")
		dir      = fs.String("data-dir", "./gridnode-demo", "parent of the nodes' data directories")
		basePort = fs.Int("base-port", 7500, "node i listens on base-port+10*(i-1) .. +3")
		replicas = fs.Int("replicas", 3, "replicas per shard")
		logs     = fs.Bool("logs", false, "copy the nodes' logs to stderr")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitInvalid
	}
	if fs.NArg() > 0 || *nodes < 1 || *nodes > 9 || *basePort < 1024 || *basePort+10**nodes > 65535 {
		fmt.Fprintln(stderr, "demo: --nodes must be 1..9 and the ports within 1024..65535")
		return exitInvalid
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return exitUnreachable
	}
	port := func(i, off int) string { return fmt.Sprintf("127.0.0.1:%d", *basePort+10*i+off) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var procs []*demoNode
	defer func() {
		if !stopDemoNodes(procs, stderr) && code == exitOK {
			code = exitUnreachable
		}
	}()
	ready := make(chan string, *nodes)
	exited := make(chan *demoNode, *nodes)
	for i := range *nodes {
		id := fmt.Sprintf("node-%d", i+1)
		var logTo io.Writer
		if *logs {
			logTo = &prefixWriter{w: stderr, prefix: id + " "}
		}
		p, err := gridproc.Start(gridproc.Options{
			Argv: []string{self, "serve",
				"--node-id", id,
				"--data-dir", filepath.Join(*dir, id),
				"--listen", port(i, 0), "--raft-listen", port(i, 1),
				"--gossip-listen", port(i, 2), "--http-listen", port(i, 3),
				"--bootstrap-expect", fmt.Sprint(*nodes), "--replicas", fmt.Sprint(*replicas),
				"--join", port(0, 2)},
			Stderr:      logTo,
			SysProcAttr: demoProcAttr(),
		})
		if err != nil {
			fmt.Fprintf(stderr, "demo: start %s: %v\n", id, err)
			return exitUnreachable
		}
		n := &demoNode{id: id, p: p}
		procs = append(procs, n)
		go func() {
			select {
			case <-p.Ready():
				ready <- id
			case <-p.Exited():
			}
		}()
		go func() {
			<-p.Exited()
			exited <- n
		}()
	}

	timeout := time.NewTimer(demoReadyTimeout)
	defer timeout.Stop()
	for up := 0; up < *nodes; {
		select {
		case <-ready:
			up++
		case n := <-exited:
			fmt.Fprintf(stderr, "demo: %s exited before it was ready: %v (ports in use? run with --logs to see why)\n", n.id, n.p.Err())
			return exitUnreachable
		case <-ctx.Done():
			return exitOK
		case <-timeout.C:
			fmt.Fprintf(stderr, "demo: %d of %d nodes ready after %v (run with --logs to see why)\n", up, *nodes, demoReadyTimeout)
			return exitUnreachable
		}
	}
	var addrs []string
	for i := range *nodes {
		addrs = append(addrs, port(i, 0))
	}
	fmt.Fprintf(stdout, "a %d-node grid is running (data in %s):\n\n", *nodes, *dir)
	for i := range *nodes {
		fmt.Fprintf(stdout, "  node-%d  grpc %s  raft %s  gossip %s  http %s\n", i+1, port(i, 0), port(i, 1), port(i, 2), port(i, 3))
	}
	fmt.Fprintf(stdout, "\ntry:\n  gridnode status --addr %s\n  gridnode reserve --addr %s --ns demo --key k1\n", addrs[0], addrs[len(addrs)-1])
	fmt.Fprintf(stdout, "  client.Dial(ctx, %q)\n\nCtrl-C stops the nodes (their data stays).\n", strings.Join(addrs, ","))
wait:
	for {
		select {
		case n := <-exited:
			// The others go on: a cluster of three outlives one node.
			fmt.Fprintf(stderr, "demo: %s exited: %v\n", n.id, n.p.Err())
		case <-ctx.Done():
			break wait
		}
	}
	fmt.Fprintln(stdout, "stopping")
	return exitOK
}

// demoNode is one node process of the demo.
type demoNode struct {
	id string
	p  *gridproc.Proc
}

// stopDemoNodes sends SIGTERM to every node still running and waits for
// them, killing those that have not stopped after demoStopTimeout. It
// reports whether every node stopped cleanly (exit 0) at this request.
func stopDemoNodes(procs []*demoNode, stderr io.Writer) bool {
	var running []*demoNode
	for _, n := range procs {
		select {
		case <-n.p.Exited():
		default:
			_ = n.p.Signal(syscall.SIGTERM)
			running = append(running, n)
		}
	}
	clean := true
	deadline := time.After(demoStopTimeout)
	for _, n := range running {
		select {
		case <-n.p.Exited():
		case <-deadline:
			n.p.Kill()
		}
		if err := n.p.Err(); err != nil {
			fmt.Fprintf(stderr, "demo: %s did not stop cleanly: %v\n", n.id, err)
			clean = false
		}
	}
	return clean
}

// prefixWriter prefixes every line of a node's log with its node. The log
// comes through a pipe in chunks of any size: a write may hold several
// lines, or part of one, which waits for the rest of its line. Each write
// passes its complete lines on in one write, so that the nodes' lines do
// not interleave. It is for one writer at a time (the command's copy).
type prefixWriter struct {
	w      io.Writer
	prefix string
	part   []byte // the start of a line not yet complete
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var out []byte
	rest := b
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		out = append(append(append(out, p.prefix...), p.part...), rest[:i+1]...)
		p.part, rest = p.part[:0], rest[i+1:]
	}
	p.part = append(p.part, rest...)
	if len(out) > 0 {
		if _, err := p.w.Write(out); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}
