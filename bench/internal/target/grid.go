package target

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/l4xg/grid/bench/internal/workload"
	"github.com/l4xg/grid/client"
)

// Namespace is the grid namespace of the benchmark's keys.
const Namespace = "bench"

// ErrLeaseLost is a Complete that found its key no longer held by the caller.
var ErrLeaseLost = errors.New("target: lease lost")

// Grid drives a grid (one node, or a cluster through the routing client)
// through the Go client (automatic batching on, the client's default and
// the normal path of a consumer).
type Grid struct {
	c      *client.Client
	procs  []Proc
	http   *http.Client
	scheme string // of the nodes' /metrics
}

// Proc is one node process of the grid under test, for its memory figure.
type Proc struct {
	// PID of the node when it is a child of this process (its VmRSS is the
	// memory figure), else 0 (process_resident_memory_bytes from /metrics).
	PID int
	// HTTPAddr serves /metrics, "" when unknown.
	HTTPAddr string
}

var _ workload.Target = (*Grid)(nil)

// NewGrid connects to the grid at addr: one node's gRPC address, or the
// comma-separated addresses of a cluster's nodes (client.Dial routes each
// operation to its shard's leader). procs are the grid's node processes,
// for Memory; none (or one without PID and HTTP address) leaves Memory
// without a figure.
func NewGrid(ctx context.Context, addr string, procs ...Proc) (*Grid, error) {
	return NewGridTLS(ctx, addr, nil, procs...)
}

// metricsURL is the /metrics of the node whose HTTP port is at addr.
func (g *Grid) metricsURL(addr string) string {
	if g.scheme == "" {
		return "http://" + addr + "/metrics"
	}
	return g.scheme + addr + "/metrics"
}

// NewGridTLS is NewGrid over TLS with conf (nil: plaintext): the gRPC
// calls and the scrapes of /metrics, which a node serving TLS serves over
// HTTPS.
func NewGridTLS(ctx context.Context, addr string, conf *tls.Config, procs ...Proc) (*Grid, error) {
	var opts []client.Option
	g := &Grid{procs: procs, http: &http.Client{Timeout: 10 * time.Second}, scheme: "http://"}
	if conf != nil {
		opts = append(opts, client.WithTLS(conf))
		g.http.Transport = &http.Transport{TLSClientConfig: conf}
		g.scheme = "https://"
	}
	c, err := client.Dial(ctx, addr, opts...)
	if err != nil {
		return nil, err
	}
	g.c = c
	return g, nil
}

// Name implements workload.Target.
func (g *Grid) Name() string { return "grid" }

// Close closes the client.
func (g *Grid) Close() error { return g.c.Close() }

// Reserve is client.Reserve: ACQUIRED acquires, BUSY and DUPLICATE are
// refusals (the duplicate suppressed), other outcomes are errors.
func (g *Grid) Reserve(ctx context.Context, key string, lease time.Duration) (workload.Reservation, error) {
	r, err := g.c.Reserve(ctx, Namespace, key, client.WithLease(lease))
	if err != nil {
		return workload.Reservation{}, err
	}
	return reservation(key, r)
}

func reservation(key string, r client.Result) (workload.Reservation, error) {
	switch r.Outcome {
	case client.OutcomeAcquired:
		return workload.Reservation{Key: key, Acquired: true, Token: r.Token}, nil
	case client.OutcomeBusy, client.OutcomeDuplicate:
		return workload.Reservation{Key: key}, nil
	default:
		return workload.Reservation{}, fmt.Errorf("grid: reserve answered %v", r.Outcome)
	}
}

// Complete is client.Complete with the reservation's token and the retention.
func (g *Grid) Complete(ctx context.Context, r workload.Reservation, retention time.Duration) error {
	res, err := g.c.Complete(ctx, Namespace, r.Key, r.Token, client.WithRetention(retention))
	if errors.Is(err, client.ErrLeaseLost) {
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	}
	if err != nil {
		return err
	}
	if res.Outcome != client.OutcomeOK {
		return fmt.Errorf("grid: complete answered %v", res.Outcome)
	}
	return nil
}

// ReserveBatch is one client.Batch of Reserve operations.
func (g *Grid) ReserveBatch(ctx context.Context, keys []string, lease time.Duration) ([]workload.Reservation, error) {
	ops := make([]client.Op, len(keys))
	for i, k := range keys {
		ops[i] = client.ReserveOp(Namespace, k, client.WithLease(lease))
	}
	results, errs, err := g.c.Batch(ctx, ops)
	if err != nil {
		return nil, err
	}
	out := make([]workload.Reservation, len(keys))
	for i := range keys {
		if errs[i] != nil {
			return nil, fmt.Errorf("grid: batch operation %d: %w", i, errs[i])
		}
		if out[i], err = reservation(keys[i], results[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Memory is the grid's resident set, summed over its nodes (a cluster holds
// every key on each of its replicas): VmRSS of each child process, or
// process_resident_memory_bytes from each node's /metrics. The Go heap in
// use, summed too, is an extra figure when every node's /metrics is
// reachable.
func (g *Grid) Memory(ctx context.Context) (workload.Memory, error) {
	var m workload.Memory
	if len(g.procs) == 0 {
		return m, errors.New("grid: no memory figure: no node process given")
	}
	var heap int64
	byPID, byHTTP := true, true
	for _, p := range g.procs {
		byPID = byPID && p.PID > 0
		byHTTP = byHTTP && p.HTTPAddr != ""
	}
	if !byPID && !byHTTP {
		return m, errors.New("grid: no memory figure: neither a child process nor an HTTP address")
	}
	for _, p := range g.procs {
		if byHTTP {
			metrics, err := g.metrics(ctx, p.HTTPAddr, "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes")
			if err != nil {
				return m, err
			}
			heap += int64(metrics["go_memstats_heap_inuse_bytes"])
			if !byPID {
				m.Bytes += int64(metrics["process_resident_memory_bytes"])
			}
		}
		if byPID {
			rss, err := VmRSS(p.PID)
			if err != nil {
				return m, err
			}
			m.Bytes += rss
		}
	}
	if byHTTP {
		m.Extra = map[string]int64{"go_heap_inuse_bytes": heap}
	}
	m.Source = "/proc/PID/status VmRSS of the child"
	if !byPID {
		m.Source = "/metrics process_resident_memory_bytes"
	}
	if len(g.procs) > 1 {
		m.Source = fmt.Sprintf("sum over %d nodes of %s", len(g.procs), m.Source)
	}
	return m, nil
}

// metrics reads the named unlabelled samples from the /metrics of the node
// at httpAddr.
func (g *Grid) metrics(ctx context.Context, httpAddr string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.metricsURL(httpAddr), nil)
	if err != nil {
		return nil, err
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("grid: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("grid: metrics of %s: %s", httpAddr, resp.Status)
	}
	return ParseMetrics(bufio.NewScanner(resp.Body), names...)
}

// ParseMetrics reads unlabelled samples of the named metrics from the
// Prometheus text format. Every name must be found.
func ParseMetrics(sc *bufio.Scanner, names ...string) (map[string]float64, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %s: %w", name, err)
		}
		out[name] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("metrics: %s not found", n)
		}
	}
	return out, nil
}

// VmRSS is the resident set of process pid in bytes, from /proc.
func VmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("VmRSS: cannot read %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("VmRSS: not in /proc/%d/status", pid)
}

// Counters reads every sample of the grid's own metrics (l4xg_grid_*) and
// process_cpu_seconds_total from each node's /metrics, summed over the
// nodes, keyed by the sample's name with its labels as written
// (`l4xg_grid_stage_seconds_sum{stage="answer"}`). A metric no node has
// observed yet is absent. For a cluster, the Raft log's writes and fsyncs
// are also given per node, as "name@node-N" (N from 1, in the order of the
// nodes).
func (g *Grid) Counters(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	for i, p := range g.procs {
		if p.HTTPAddr == "" {
			return nil, errors.New("grid: counters: a node without an HTTP address")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.metricsURL(p.HTTPAddr), nil)
		if err != nil {
			return nil, err
		}
		resp, err := g.http.Do(req)
		if err != nil {
			return nil, fmt.Errorf("grid: metrics: %w", err)
		}
		node := map[string]float64{}
		err = addSamples(node, bufio.NewScanner(resp.Body))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("grid: metrics of %s: %w", p.HTTPAddr, err)
		}
		for name, v := range node {
			out[name] += v
		}
		if len(g.procs) > 1 { // the Raft log's writes and syncs per node too
			for _, name := range [...]string{"l4xg_grid_raft_log_writes_total", "l4xg_grid_raft_log_fsyncs_total"} {
				out[fmt.Sprintf("%s@node-%d", name, i+1)] = node[name]
			}
		}
	}
	return out, nil
}

// addSamples adds the samples of the Prometheus text format read by sc to
// sums: those of l4xg_grid_* and process_cpu_seconds_total.
func addSamples(sums map[string]float64, sc *bufio.Scanner) error {
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "l4xg_grid_") && !strings.HasPrefix(line, "process_cpu_seconds_total ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return fmt.Errorf("sample %q: %w", line, err)
		}
		sums[line[:i]] += v
	}
	return sc.Err()
}

// ClientStats is what the Go client measured of its batched calls so far.
func (g *Grid) ClientStats() client.Stats { return g.c.Stats() }
