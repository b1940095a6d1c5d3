package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/internal/launch"
	"github.com/l4xg/grid/internal/netlab"
	"github.com/l4xg/grid/internal/tmpfs"
)

// node is one gridnode serve process of the cluster under test. Its data
// directory, addresses and command line stay the same across restarts.
type node struct {
	idx    int
	id     string
	dir    string   // data directory
	wrap   []string // command prefix (its network namespace), or none
	grpc   string
	raft   string
	gossip string
	http   string
	clock  string // the fault clock file
	log    io.Writer

	mu     sync.Mutex
	proc   *gridproc.Proc // nil while stopped
	paused bool
	conn   *grpc.ClientConn
}

// procs is the cluster of gridnode processes, in a netlab.Lab or on
// loopback.
type procs struct {
	cfg   config
	bin   string
	lab   *netlab.Lab // nil: loopback, no partitions
	nodes []*node
	tmpfs []string // mounts to remove

	exitsMu sync.Mutex
	exits   []string // nodes that exited on their own (watch)
	logs    []*os.File
}

// Ports of a node in a Lab, where each node has an address of its own.
const (
	portGRPC   = 7420
	portRaft   = 7421
	portGossip = 7422
	portHTTP   = 7423
)

// startProcs starts cfg.Nodes nodes (and makes room for one more when the
// churn fault may add one) and waits until they form one cluster.
func startProcs(ctx context.Context, cfg config, bin, dir string) (*procs, error) {
	p := &procs{cfg: cfg, bin: bin}
	total := cfg.Nodes
	if cfg.has(faultChurn) && total < maxNodes {
		total++ // a spare that joins and leaves
	}
	if cfg.needsLab() {
		lab, err := netlab.New(total)
		if err != nil {
			return nil, fmt.Errorf("%w (partition faults need root for network namespaces: run as root, or leave partition out of --faults)", err)
		}
		p.lab = lab
	}
	var loop []string
	if p.lab == nil {
		udp := make([]bool, 4*total)
		for i := range total {
			udp[4*i+2] = true
		}
		var err error
		if loop, err = launch.LoopbackAddrs(udp); err != nil {
			p.close()
			return nil, err
		}
	}
	for i := range total {
		n := &node{idx: i, id: fmt.Sprintf("n%d", i+1), dir: filepath.Join(dir, "nodes", fmt.Sprintf("n%d", i+1))}
		n.clock = n.dir + ".clock"
		if p.lab != nil {
			ip := p.lab.NodeIP(i)
			n.wrap = p.lab.Wrap(i)
			n.grpc, n.raft = fmt.Sprintf("%s:%d", ip, portGRPC), fmt.Sprintf("%s:%d", ip, portRaft)
			n.gossip, n.http = fmt.Sprintf("%s:%d", ip, portGossip), fmt.Sprintf("%s:%d", ip, portHTTP)
		} else {
			n.grpc, n.raft, n.gossip, n.http = loop[4*i], loop[4*i+1], loop[4*i+2], loop[4*i+3]
		}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			p.close()
			return nil, err
		}
		if cfg.has(faultDisk) {
			if err := tmpfs.Mount(n.dir, cfg.DiskSize); err != nil {
				p.close()
				return nil, fmt.Errorf("disk faults need a tmpfs per node (root): %w", err)
			}
			p.tmpfs = append(p.tmpfs, n.dir)
		}
		f, err := os.Create(filepath.Join(dir, "nodes", n.id+".log"))
		if err != nil {
			p.close()
			return nil, err
		}
		p.logs = append(p.logs, f)
		n.log = f
		p.nodes = append(p.nodes, n)
	}
	for _, n := range p.members() {
		if err := p.start(n, false); err != nil {
			p.close()
			return nil, err
		}
	}
	for _, n := range p.members() {
		if _, err := n.waitReady(ctx, 90*time.Second); err != nil {
			p.close()
			return nil, fmt.Errorf("node %s: %w", n.id, err)
		}
	}
	if err := p.awaitStable(ctx, p.members(), 90*time.Second); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// members are the nodes started at the beginning (not the spare).
func (p *procs) members() []*node { return p.nodes[:p.cfg.Nodes] }

// addrs are the client addresses of every node, the spare included.
func (p *procs) addrs() []string {
	var out []string
	for _, n := range p.nodes {
		out = append(out, n.grpc)
	}
	return out
}

// start starts n. A fresh node (wiped, joining a running cluster) is
// started without --bootstrap-expect.
func (p *procs) start(n *node, fresh bool) error {
	var join []string
	for _, o := range p.nodes {
		if o != n {
			join = append(join, o.gossip)
		}
	}
	args := append(append([]string{}, n.wrap...), p.bin, "serve", "--node-id", n.id, "--data-dir", n.dir,
		"--listen", n.grpc, "--raft-listen", n.raft, "--gossip-listen", n.gossip, "--http-listen", n.http,
		"--replicas", fmt.Sprint(p.cfg.Replicas), "--join", strings.Join(join, ","), "--log-level", p.cfg.NodeLogLevel,
		"--max-clock-offset", p.cfg.MaxOffset.String(), "--grace-period", p.cfg.Grace.String(),
		"--shards", fmt.Sprint(p.cfg.Shards))
	if !fresh && n.idx < p.cfg.Nodes {
		args = append(args, "--bootstrap-expect", fmt.Sprint(p.cfg.Nodes))
	}
	if p.cfg.has(faultSkew) {
		args = append(args, "--enable-fault-injection", "--fault-clock-file", n.clock)
	}
	proc, err := gridproc.Start(gridproc.Options{Argv: args, Stderr: n.log,
		// No node outlives the tool, even one killed with kill -9.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.proc, n.paused = proc, false
	n.mu.Unlock()
	go p.watch(n, proc)
	return nil
}

// watch records proc's end if it was not the tool's doing (kill and stop
// let go of the process first): a node that exits on its own, a panic or
// a refusal to start, is a failure whatever the other checks find.
func (p *procs) watch(n *node, proc *gridproc.Proc) {
	<-proc.Exited()
	n.mu.Lock()
	own := n.proc == proc
	n.mu.Unlock()
	if own {
		p.exitsMu.Lock()
		p.exits = append(p.exits, fmt.Sprintf("%s exited on its own: %v", n.id, proc.Err()))
		p.exitsMu.Unlock()
	}
}

// exited returns the nodes' exits the tool did not cause.
func (p *procs) exited() []string {
	p.exitsMu.Lock()
	defer p.exitsMu.Unlock()
	return slices.Clone(p.exits)
}

// running is n's process, or nil.
func (n *node) running() *gridproc.Proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// waitReady waits for n's "ready: grpc" line.
func (n *node) waitReady(ctx context.Context, within time.Duration) (gridproc.Addrs, error) {
	proc := n.running()
	if proc == nil {
		return gridproc.Addrs{}, errors.New("not running")
	}
	return proc.WaitReady(ctx, within)
}

// kill sends SIGKILL (after SIGCONT, if paused) and waits for the end.
func (n *node) kill() {
	n.mu.Lock()
	proc := n.proc
	n.proc, n.paused = nil, false
	n.mu.Unlock()
	if proc != nil {
		proc.Kill()
	}
}

// stop sends SIGTERM (the graceful hand-over) and waits, killing after
// grace.
func (n *node) stop(grace time.Duration) {
	n.mu.Lock()
	proc := n.proc
	n.proc, n.paused = nil, false
	n.mu.Unlock()
	if proc != nil {
		_ = proc.Signal(syscall.SIGCONT)
		proc.Stop(grace)
	}
}

// pause sends SIGSTOP, resume SIGCONT.
func (n *node) pause() error { return n.signal(syscall.SIGSTOP, true) }

func (n *node) resume() error { return n.signal(syscall.SIGCONT, false) }

func (n *node) signal(sig syscall.Signal, paused bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return errors.New("not running")
	}
	n.paused = paused
	return n.proc.Signal(sig)
}

// setClock writes n's clock offset (the node re-reads its file).
func (n *node) setClock(d time.Duration) error {
	tmp := n.clock + ".tmp"
	if err := os.WriteFile(tmp, []byte(d.String()+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, n.clock)
}

// client is a connection to n's gRPC port.
func (n *node) client() (gridpb.GridClient, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		c, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		n.conn = c
	}
	return gridpb.NewGridClient(n.conn), nil
}

// clusterMap asks n for its map.
func (n *node) clusterMap(ctx context.Context) (*gridpb.ClusterMapResponse, error) {
	c, err := n.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.ClusterMap(ctx, &gridpb.ClusterMapRequest{})
}

// status asks n for its status.
func (n *node) status(ctx context.Context) (*gridpb.StatusResponse, error) {
	c, err := n.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Status(ctx, &gridpb.StatusRequest{})
}

// unstable says why the nodes are not one converged cluster, or "": every
// node answers the same settled map (launch.Unstable), and each shard's leader reports a
// committed configuration whose voters are the map's replica set.
func (p *procs) unstable(ctx context.Context, nodes []*node) string {
	var maps []*gridpb.ClusterMapResponse
	var ids []string
	for _, n := range nodes {
		m, err := n.clusterMap(ctx)
		if err != nil {
			return fmt.Sprintf("%s: %v", n.id, err)
		}
		maps, ids = append(maps, m), append(ids, n.id)
	}
	if why := launch.Unstable(maps, ids); why != "" {
		return why
	}
	groups := map[uint32]*gridpb.ShardStatus{}
	for _, n := range nodes {
		st, err := n.status(ctx)
		if err != nil {
			return fmt.Sprintf("%s: %v", n.id, err)
		}
		if !st.GetReady() {
			return n.id + " is not ready"
		}
		for _, s := range st.GetShards() {
			if s.GetRaftState() == "Leader" {
				groups[s.GetId()] = s
			}
		}
	}
	for _, sh := range maps[0].GetShards() {
		g := groups[sh.GetId()]
		if g == nil {
			return fmt.Sprintf("shard %d has no leader", sh.GetId())
		}
		if !g.GetConfigCommitted() {
			return fmt.Sprintf("shard %d: configuration at %d not committed", sh.GetId(), g.GetConfigIndex())
		}
		var voters []string
		for _, m := range g.GetGroup() {
			if !m.GetVoter() {
				return fmt.Sprintf("shard %d: %s is not a voter", sh.GetId(), m.GetId())
			}
			voters = append(voters, m.GetId())
		}
		if !sameSet(voters, sh.GetReplicas()) {
			return fmt.Sprintf("shard %d: voters %v, map replicas %v", sh.GetId(), voters, sh.GetReplicas())
		}
	}
	return ""
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, x := range a {
		seen[x] = true
	}
	for _, x := range b {
		if !seen[x] {
			return false
		}
	}
	return true
}

// awaitStable waits until nodes are one converged cluster (unstable says
// ""), for within at most; the error says what was still wrong.
func (p *procs) awaitStable(ctx context.Context, nodes []*node, within time.Duration) error {
	deadline := time.Now().Add(within)
	why := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if why = p.unstable(ctx, nodes); why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("not converged within %v: %s", within, why)
}

// controlLeader is the control group's leader as the first node that
// answers knows it.
func (p *procs) controlLeader(ctx context.Context) *node {
	for _, n := range p.nodes {
		if n.running() == nil {
			continue
		}
		m, err := n.clusterMap(ctx)
		if err != nil || m.GetControlLeader() == "" {
			continue
		}
		for _, o := range p.nodes {
			if o.id == m.GetControlLeader() {
				return o
			}
		}
	}
	return nil
}

// close stops every node (SIGKILL: the run is over), closes connections,
// removes the network and the tmpfs mounts.
func (p *procs) close() {
	var wg sync.WaitGroup
	for _, n := range p.nodes {
		wg.Go(func() {
			n.kill()
			n.mu.Lock()
			if n.conn != nil {
				n.conn.Close()
				n.conn = nil
			}
			n.mu.Unlock()
		})
	}
	wg.Wait()
	if p.lab != nil {
		if err := p.lab.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
		}
	}
	for _, m := range p.tmpfs {
		if err := tmpfs.Unmount(m); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
		}
	}
	for _, f := range p.logs {
		f.Close()
	}
}
