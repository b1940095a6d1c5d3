package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/internal/gridproc"
)

// result is one check's verdict and figures.
type result struct {
	Name    string         `json:"name"`
	Pass    bool           `json:"pass"`
	Safety  bool           `json:"safety"` // a safety check: its failure fails the run
	Detail  string         `json:"detail"`
	Figures map[string]any `json:"figures,omitempty"`
	// Key is the key a failure is about, when one is.
	Key string `json:"key,omitempty"`
}

// outcome is what a run found.
type outcome struct {
	cfg      config
	schedule []planned
	faults   []made
	checks   []result
	samples  []sample
	history  []porcupine.Operation
	viz      string // porcupine's visualization of the failing keys, "" if none
	elapsed  time.Duration
	verdict  bool
}

// runChaos runs one chaos run and writes its report into cfg.Out.
func runChaos(ctx context.Context, cfg config, stderr io.Writer) (*outcome, error) {
	// The nodes' data of an earlier run into the same directory is not
	// this cluster's.
	if err := os.RemoveAll(filepath.Join(cfg.Out, "nodes")); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Out, "nodes"), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(cfg.Out, "events.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	began := time.Now()
	var logMu sync.Mutex
	log := func(format string, args ...any) {
		line := fmt.Sprintf("%8.3fs  %s", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintln(logf, line)
		if cfg.Progress {
			fmt.Fprintf(stderr, "\r\033[K%s\n", line)
		} else {
			fmt.Fprintln(stderr, line)
		}
	}
	log("seed %d: %d nodes, %d replicas, %d shards, %v, faults %s, workload %s", cfg.Seed, cfg.Nodes, cfg.Replicas, cfg.Shards, cfg.Duration, strings.Join(cfg.Faults, ","), cfg.Workload)
	bin := cfg.Bin
	if bin == "" {
		log("building gridnode")
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		bin, err = gridproc.BuildGridnode(bctx, "", filepath.Join(cfg.Out, "nodes"))
		cancel()
		if err != nil {
			return nil, err
		}
	}
	p, err := startProcs(ctx, cfg, bin, cfg.Out)
	if err != nil {
		return nil, err
	}
	defer p.close()
	log("cluster formed: %s", strings.Join(p.addrs()[:cfg.Nodes], ","))

	o := &outcome{cfg: cfg, schedule: plan(cfg)}
	start := time.Now()
	g := check.NewGate()
	inj := &injector{p: p, start: start, log: log, gate: g, cutOff: -1}
	l := newLoad(cfg, start, g, inj)
	wrap, closeWrap, err := brokenWrap(ctx, cfg, p, inj)
	if err != nil {
		return nil, err
	}
	defer closeWrap()

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	if cfg.register() {
		wg.Go(func() { errs <- l.runRegister(loadCtx, p.addrs()[:cfg.Nodes], wrap) })
	}
	if cfg.app() {
		wg.Go(func() { errs <- l.runApp(loadCtx, p.addrs()[:cfg.Nodes]) })
	}
	injDone := make(chan struct{})
	go func() {
		defer close(injDone)
		inj.run(loadCtx, o.schedule)
	}()
	stopProgress := progress(cfg, stderr, start, l, inj)
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	<-injDone // the last fault is undone and settled
	stopLoad()
	wg.Wait()
	stopProgress()
	close(errs)
	for e := range errs {
		if e != nil {
			err = errors.Join(err, e)
		}
	}
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	log("load stopped; checking")
	o.faults = inj.faults()
	o.history = l.rec.Operations()
	l.mu.Lock()
	o.samples = slices.Clone(l.samples)
	l.mu.Unlock()
	slices.SortFunc(o.samples, func(a, b sample) int { return int(a.Start - b.Start) })
	o.checks = verify(ctx, o, p, inj, l, log)
	o.elapsed = time.Since(began)
	o.verdict = true
	for _, c := range o.checks {
		if c.Safety && !c.Pass {
			o.verdict = false
		}
	}
	if err := writeReport(o); err != nil {
		return o, err
	}
	return o, nil
}

// brokenWrap is the executor wrapper of --broken, or nil.
func brokenWrap(ctx context.Context, cfg config, p *procs, inj *injector) (func(check.Executor) check.Executor, func(), error) {
	switch cfg.Broken {
	case "stale-gets":
		return check.StaleGets, func() {}, nil
	case "lost-completes":
		return check.LostCompletes, func() {}, nil
	case "follower-reads":
		var nodes []*client.Client
		closeAll := func() {
			for _, c := range nodes {
				c.Close()
			}
		}
		for _, a := range p.addrs()[:cfg.Nodes] {
			c, err := client.Dial(ctx, a, client.WithoutRouting(), client.WithRetryPolicy(client.RetryPolicy{Attempts: 1}))
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			nodes = append(nodes, c)
		}
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(cfg.Seed, 0xbad))
		// The node cut off while there is one, else any node.
		reader := func(string) int {
			if n := inj.cut(); n >= 0 && n < len(nodes) {
				return n
			}
			mu.Lock()
			defer mu.Unlock()
			return rng.IntN(len(nodes))
		}
		return func(e check.Executor) check.Executor {
			return check.FollowerReads(e, registerNS, nodes, reader)
		}, closeAll, nil
	}
	return nil, func() {}, nil
}

// progress prints a progress line every second on a terminal, every 10 s
// otherwise, until the returned function is called.
func progress(cfg config, w io.Writer, start time.Time, l *load, inj *injector) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	every := 10 * time.Second
	if cfg.Progress {
		every = time.Second
	}
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		var lastOps int64
		for {
			select {
			case <-stop:
				if cfg.Progress {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-t.C:
			}
			ops := l.regOps.Load() + l.appOK.Load() + l.appErr.Load()
			n, active := inj.status()
			if active == "" {
				active = "no fault"
			}
			line := fmt.Sprintf("[%v/%v] ops %d (%.0f/s) unknown %d app errors %d faults %d/%d: %s",
				time.Since(start).Round(time.Second), cfg.Duration, ops, float64(ops-lastOps)/every.Seconds(),
				l.regUnk.Load(), l.appErr.Load(), n, len(plan(cfg)), active)
			lastOps = ops
			if cfg.Progress {
				fmt.Fprintf(w, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(w, line)
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}
