package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/l4xg/grid/bench/internal/target"
	"github.com/l4xg/grid/bench/internal/workload"
	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/internal/launch"
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
		t, err := target.NewGrid(ctx, b.cfg.Addr, target.Proc{HTTPAddr: b.cfg.GridHTTP})
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
		if b.bin, err = gridproc.BuildGridnode(ctx, mod, b.tmp); err != nil {
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

func (g *gridShared) run(ctx context.Context, w string, wcfg workload.Config) (workload.Result, error) {
	profile := g.b.cfg.CPUProfile && w == g.b.cfg.ProfileWorkload && g.b.profile == ""
	if g.external != nil {
		var nodes []profiled
		if profile {
			nodes = []profiled{{httpAddr: g.b.cfg.GridHTTP}}
		}
		return g.b.withProfile(ctx, w, nodes, func() (workload.Result, error) {
			return workload.Run(ctx, w, g.external, wcfg)
		})
	}
	if g.b.cfg.GridNodes > 1 {
		return g.runCluster(ctx, w, wcfg, profile)
	}
	g.starts++
	logf, err := os.Create(filepath.Join(g.b.tmp, fmt.Sprintf("gridnode-%d.log", g.starts)))
	if err != nil {
		return workload.Result{}, err
	}
	defer logf.Close()
	node, err := launch.StartGridnode(ctx, launch.GridnodeOptions{
		Bin: g.b.bin, Shards: g.b.cfg.GridShards, Flags: append(slices.Clone(g.b.cfg.GridFlags), g.b.gridTLSFlags...), Pprof: g.b.cfg.CPUProfile, Stderr: logf, Env: g.b.gridEnv,
	})
	if err != nil {
		return workload.Result{}, err
	}
	defer node.Stop()
	t, err := target.NewGridTLS(ctx, node.Addr, g.b.gridTLS, target.Proc{PID: node.PID(), HTTPAddr: node.HTTPAddr})
	if err != nil {
		return workload.Result{}, err
	}
	defer t.Close()
	var nodes []profiled
	if profile {
		nodes = []profiled{{httpAddr: node.HTTPAddr}}
	}
	return g.b.withProfile(ctx, w, nodes, func() (workload.Result, error) {
		return g.b.withBreakdown(ctx, t, func() (workload.Result, error) { return workload.Run(ctx, w, t, wcfg) })
	})
}

// runCluster runs one cell on a fresh cluster of --grid-nodes children,
// through a routing client dialled with every node's address. With
// profile, every node is profiled at once.
func (g *gridShared) runCluster(ctx context.Context, w string, wcfg workload.Config, profile bool) (workload.Result, error) {
	g.starts++
	n := g.b.cfg.GridNodes
	logs := make([]*os.File, n)
	defer func() {
		for _, f := range logs {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i := range logs {
		f, err := os.Create(filepath.Join(g.b.tmp, fmt.Sprintf("gridnode-%d-node-%d.log", g.starts, i+1)))
		if err != nil {
			return workload.Result{}, err
		}
		logs[i] = f
	}
	c, err := launch.StartGridCluster(ctx, launch.GridClusterOptions{
		Bin: g.b.bin, Nodes: n, Replicas: g.b.cfg.GridReplicas, Shards: g.b.cfg.GridShards, Flags: append(slices.Clone(g.b.cfg.GridFlags), g.b.gridTLSFlags...), TLS: g.b.gridTLS,
		Pprof: g.b.cfg.CPUProfile, Stderr: func(i int) io.Writer { return logs[i] }, Env: g.b.gridEnv,
	})
	if err != nil {
		return workload.Result{}, err
	}
	defer c.Stop()
	if c.Spread != "" {
		fmt.Fprintf(g.b.log, "\nbench: grid: leaderships not spread as planned, running anyway: %s\n", c.Spread)
	}
	procs := make([]target.Proc, n)
	var nodes []profiled
	for i, node := range c.Nodes {
		procs[i] = target.Proc{PID: node.PID(), HTTPAddr: node.HTTPAddr}
		if profile {
			nodes = append(nodes, profiled{name: node.ID, httpAddr: node.HTTPAddr})
		}
	}
	t, err := target.NewGridTLS(ctx, c.Addrs(), g.b.gridTLS, procs...)
	if err != nil {
		return workload.Result{}, err
	}
	defer t.Close()
	res, err := g.b.withProfile(ctx, w, nodes, func() (workload.Result, error) {
		return g.b.withBreakdown(ctx, t, func() (workload.Result, error) { return workload.Run(ctx, w, t, wcfg) })
	})
	for _, node := range c.Nodes {
		if node.Exited() && err == nil {
			err = fmt.Errorf("bench: grid: %s exited during the run", node.ID)
		}
	}
	return res, err
}

// profiled is a node whose CPU profile is taken: name "" for a single
// node, its id in a cluster.
type profiled struct{ name, httpAddr string }

// withProfile runs f, a run of workload w, while it fetches a CPU profile
// of each of nodes (none: no profile) lasting most of the run, then writes
// them and their top: for a single node grid-<w>.cpu.pprof, for a cluster
// one grid-<w>.<node>.cpu.pprof per node, with a top per node and one of
// all nodes merged; and the benchmark process's, client-<w>.cpu.pprof.
func (b *bencher) withProfile(ctx context.Context, w string, nodes []profiled, f func() (workload.Result, error)) (workload.Result, error) {
	if len(nodes) == 0 {
		return f()
	}
	secs := max(1, int((b.cfg.Duration-2*time.Second)/time.Second))
	paths := make([]string, len(nodes))
	done := make(chan error, len(nodes))
	for i, n := range nodes {
		paths[i] = filepath.Join(b.cfg.Out, profileName(w, n.name, "cpu.pprof"))
		go func() {
			err := fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", n.httpAddr, secs), paths[i])
			if err != nil && n.name != "" {
				err = fmt.Errorf("%s: %w", n.name, err)
			}
			done <- err
		}()
	}
	// The benchmark process too: the client's side of the same run.
	clientPath := filepath.Join(b.cfg.Out, "client-"+w+".cpu.pprof")
	stopClient, cerr := startProcessProfile(clientPath)
	res, err := f()
	var perrs []error
	if cerr == nil {
		cerr = stopClient()
	}
	if cerr != nil {
		perrs = append(perrs, fmt.Errorf("client: %w", cerr))
	}
	for range nodes {
		perrs = append(perrs, <-done)
	}
	if perr := errors.Join(perrs...); perr != nil {
		fmt.Fprintf(b.log, "\nbench: cpu profile: %v\n", perr)
		return res, err
	}
	b.profile = paths[0]
	for i, n := range nodes {
		b.pprofTop(filepath.Join(b.cfg.Out, profileName(w, n.name, "pprof-top.txt")), paths[i])
	}
	if len(nodes) > 1 {
		b.pprofTop(filepath.Join(b.cfg.Out, profileName(w, "", "pprof-top.txt")), paths...)
	}
	b.pprofTopOf(filepath.Join(b.cfg.Out, "client-"+w+".pprof-top.txt"), "", clientPath)
	return res, err
}

// startProcessProfile starts a CPU profile of this process into path; stop
// ends it and closes the file.
func startProcessProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// profileName is the name of a profile file of workload w's run on node
// ("" for a single node).
func profileName(w, node, suffix string) string {
	if node == "" {
		return "grid-" + w + "." + suffix
	}
	return "grid-" + w + "." + node + "." + suffix
}

// pprofTop writes go tool pprof -top of the profiles (merged when several)
// to path.
func (b *bencher) pprofTop(path string, profiles ...string) {
	b.pprofTopOf(path, b.bin, profiles...)
}

// pprofTopOf writes go tool pprof -top of the profiles of binary bin ("":
// the profiles' own symbols) to path.
func (b *bencher) pprofTopOf(path, bin string, profiles ...string) {
	args := []string{"tool", "pprof", "-top", "-nodecount=40"}
	if bin != "" {
		args = append(args, bin)
	}
	out, err := exec.Command("go", append(args, profiles...)...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(b.log, "\nbench: go tool pprof: %v\n%s", err, out)
	} else if werr := os.WriteFile(path, out, 0o644); werr != nil {
		fmt.Fprintf(b.log, "\nbench: %v\n", werr)
	}
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
	t, err := target.NewRedis(ctx, b.cfg.RedisAddr, b.cfg.maxConc()+8)
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

// durableRedis is the redis-durable target: a fresh redis-server per
// cell, started here with appendfsync always (launch.StartDurableRedis).
type durableRedis struct{ b *bencher }

func newDurableRedis(b *bencher) (*durableRedis, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("%w (install it, e.g. apt-get install redis-server)", launch.ErrNoRedisServer)
	}
	return &durableRedis{b: b}, nil
}

func (d *durableRedis) run(ctx context.Context, w string, wcfg workload.Config) (workload.Result, error) {
	srv, err := launch.StartDurableRedis(ctx, nil)
	if err != nil {
		return workload.Result{}, err
	}
	defer srv.Stop()
	t, err := target.NewRedis(ctx, srv.Addr, wcfg.Concurrency+8)
	if err != nil {
		return workload.Result{}, err
	}
	defer t.Close()
	return workload.Run(ctx, w, t, wcfg)
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

// postgresShared is the postgres target: one pool for the run (the
// largest concurrency + 8 connections, fewer if the server has fewer
// free), and a table of its own per cell, dropped after it.
type postgresShared struct {
	b *bencher
	p *target.Postgres
}

func newPostgresShared(ctx context.Context, b *bencher) (*postgresShared, error) {
	p, err := target.NewPostgres(ctx, b.cfg.PostgresDSN, b.cfg.maxConc()+8)
	if err != nil {
		return nil, err
	}
	note := describePostgres(p.Info())
	if !p.Info().Durable() {
		fmt.Fprintf(b.log, "bench: postgres: not durable (fsync %s, synchronous_commit %s): its figures are not those of a durable store\n",
			p.Info().Fsync, p.Info().SynchronousCommit)
	}
	if i := p.Info(); i.Capped {
		fmt.Fprintf(b.log, "bench: postgres: a pool of %d connections, not %d: the server's max_connections leaves no more free; more callers wait for a connection\n",
			i.PoolSize, i.Asked)
	}
	if b.notes == nil {
		b.notes = map[string]string{}
	}
	b.notes["postgres"] = note
	return &postgresShared{b: b, p: p}, nil
}

// describePostgres says what the postgres target is, for the results:
// where, which version, whether durable, and its pool.
func describePostgres(i target.PostgresInfo) string {
	durable := fmt.Sprintf("fsync %s, synchronous_commit %s", i.Fsync, i.SynchronousCommit)
	if !i.Durable() {
		durable += ": NOT durable"
	}
	pool := fmt.Sprintf("a pool of %d connections", i.PoolSize)
	if i.Capped {
		pool += fmt.Sprintf(" (capped from %d by the server's max_connections)", i.Asked)
	}
	return fmt.Sprintf("PostgreSQL %s at %s, a table per cell, %s, %s", i.Version, i.Server, durable, pool)
}

func (p *postgresShared) close() { p.p.Close() }

func (p *postgresShared) run(ctx context.Context, w string, wcfg workload.Config) (workload.Result, error) {
	t, err := p.p.CreateTable(ctx, target.TableName(wcfg.Prefix))
	if err != nil {
		return workload.Result{}, err
	}
	res, err := workload.Run(ctx, w, t, wcfg)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if derr := t.Drop(cctx); derr != nil {
		fmt.Fprintf(p.b.log, "\nbench: postgres: %v\n", derr)
	}
	return res, err
}
