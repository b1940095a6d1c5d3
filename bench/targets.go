package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/l4xg/grid/bench/internal/launch"
	"github.com/l4xg/grid/bench/internal/target"
	"github.com/l4xg/grid/bench/internal/workload"
)

// cleanupTimeout bounds the removal of a cell's keys, even after ^C.
const cleanupTimeout = 2 * time.Minute

// gridShared is the grid target: a node of --addr, or a fresh child node
// per cell.
type gridShared struct {
	b        *bencher
	external *target.Grid
	starts   int
}

func newGridShared(ctx context.Context, b *bencher) (*gridShared, error) {
	g := &gridShared{b: b}
	if b.cfg.Addr != "" {
		t, err := target.NewGrid(ctx, b.cfg.Addr, b.cfg.GridHTTP, 0)
		if err != nil {
			return nil, err
		}
		g.external = t
		return g, nil
	}
	b.bin = b.cfg.GridBin
	if b.bin == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		mod, err := launch.ModuleDir(wd)
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(b.log, "bench: building ./cmd/gridnode")
		if b.bin, err = launch.BuildGridnode(ctx, mod, b.tmp); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (g *gridShared) close() {
	if g.external != nil {
		g.external.Close()
	}
}

func (g *gridShared) run(ctx context.Context, round int, w string, wcfg workload.Config) (workload.Result, error) {
	profile := g.b.cfg.CPUProfile && w == workload.ReserveUnique && g.b.profile == ""
	if g.external != nil {
		var httpAddr string
		if profile {
			httpAddr = g.b.cfg.GridHTTP
		}
		return g.b.withProfile(ctx, httpAddr, func() (workload.Result, error) {
			return workload.Run(ctx, w, g.external, wcfg)
		})
	}
	g.starts++
	logf, err := os.Create(filepath.Join(g.b.tmp, fmt.Sprintf("gridnode-%d.log", g.starts)))
	if err != nil {
		return workload.Result{}, err
	}
	defer logf.Close()
	node, err := launch.StartGridnode(ctx, launch.GridnodeOptions{
		Bin: g.b.bin, Shards: g.b.cfg.GridShards, Pprof: g.b.cfg.CPUProfile, Stderr: logf,
	})
	if err != nil {
		return workload.Result{}, err
	}
	defer node.Stop()
	t, err := target.NewGrid(ctx, node.Addr, node.HTTPAddr, node.PID())
	if err != nil {
		return workload.Result{}, err
	}
	defer t.Close()
	var httpAddr string
	if profile {
		httpAddr = node.HTTPAddr
	}
	return g.b.withProfile(ctx, httpAddr, func() (workload.Result, error) {
		return workload.Run(ctx, w, t, wcfg)
	})
}

// withProfile runs f while it fetches a CPU profile of the node at httpAddr
// ("" for none) lasting most of the run, then writes it and its top.
func (b *bencher) withProfile(ctx context.Context, httpAddr string, f func() (workload.Result, error)) (workload.Result, error) {
	if httpAddr == "" {
		return f()
	}
	secs := max(1, int((b.cfg.Duration-2*time.Second)/time.Second))
	path := filepath.Join(b.cfg.Out, "grid-reserve-unique.cpu.pprof")
	done := make(chan error, 1)
	go func() {
		done <- fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, secs), path)
	}()
	res, err := f()
	if perr := <-done; perr != nil {
		fmt.Fprintf(b.log, "\nbench: cpu profile: %v\n", perr)
		return res, err
	}
	b.profile = path
	top := filepath.Join(b.cfg.Out, "grid-reserve-unique.pprof-top.txt")
	args := []string{"tool", "pprof", "-top", "-nodecount=40"}
	if b.bin != "" {
		args = append(args, b.bin)
	}
	out, perr := exec.Command("go", append(args, path)...).CombinedOutput()
	if perr != nil {
		fmt.Fprintf(b.log, "\nbench: go tool pprof: %v\n%s", perr, out)
	} else if werr := os.WriteFile(top, out, 0o644); werr != nil {
		fmt.Fprintf(b.log, "\nbench: %v\n", werr)
	}
	return res, err
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s (is the node serving pprof?)", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// redisShared is the Redis target: one pool for the run; each cell's keys
// are removed after it.
type redisShared struct {
	b *bencher
	t *target.Redis
}

func newRedisShared(ctx context.Context, b *bencher) (*redisShared, error) {
	t, err := target.NewRedis(ctx, b.cfg.RedisAddr, b.cfg.Conc+8)
	if err != nil {
		return nil, err
	}
	return &redisShared{b: b, t: t}, nil
}

func (r *redisShared) close() { r.t.Close() }

func (r *redisShared) run(ctx context.Context, w string, wcfg workload.Config) (workload.Result, error) {
	res, err := workload.Run(ctx, w, r.t, wcfg)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, cerr := r.t.Cleanup(cctx, wcfg.Prefix); cerr != nil {
		fmt.Fprintf(r.b.log, "\nbench: redis: cleanup of %s*: %v\n", wcfg.Prefix, cerr)
	}
	return res, err
}

// etcdShared is the etcd target: --etcd-endpoints, or a fresh throwaway
// cluster per cell.
type etcdShared struct {
	b        *bencher
	external *target.Etcd
}

func newEtcdShared(ctx context.Context, b *bencher) (*etcdShared, error) {
	e := &etcdShared{b: b}
	if len(b.cfg.EtcdEPs) > 0 {
		t, err := target.NewEtcd(ctx, b.cfg.EtcdEPs)
		if err != nil {
			return nil, err
		}
		e.external = t
		return e, nil
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return nil, fmt.Errorf("no --etcd-endpoints and %w (install it, e.g. apt-get install etcd-server)", launch.ErrNoEtcd)
	}
	return e, nil
}

func (e *etcdShared) close() {
	if e.external != nil {
		e.external.Close()
	}
}

func (e *etcdShared) run(ctx context.Context, w string, wcfg workload.Config) (workload.Result, error) {
	if e.external != nil {
		res, err := workload.Run(ctx, w, e.external, wcfg)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, cerr := e.external.Cleanup(cctx, wcfg.Prefix); cerr != nil {
			fmt.Fprintf(e.b.log, "\nbench: etcd: cleanup of %s: %v\n", wcfg.Prefix, cerr)
		}
		return res, err
	}
	cl, err := launch.StartEtcd(ctx, e.b.cfg.EtcdMembrs, nil)
	if err != nil {
		return workload.Result{}, err
	}
	defer cl.Stop()
	t, err := target.NewEtcd(ctx, cl.Endpoints)
	if err != nil {
		return workload.Result{}, err
	}
	defer t.Close()
	return workload.Run(ctx, w, t, wcfg)
}
