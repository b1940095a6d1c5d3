package launch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/l4xg/grid/api/gridpb"
)

// ErrUnstable is a cluster whose map did not settle within the timeout.
var ErrUnstable = errors.New("launch: grid cluster not stable")

// Defaults of GridClusterOptions.
const (
	DefaultClusterTimeout = 2 * time.Minute
	// DefaultSettle is how long the map's epoch must stay the same.
	DefaultSettle = time.Second
	// DefaultLeaderWait is how long StartGridCluster waits, once the map is
	// stable, for every shard to be led by its preferred leader.
	DefaultLeaderWait = 20 * time.Second
)

// GridClusterOptions of StartGridCluster. Zero values are defaults.
type GridClusterOptions struct {
	Bin   string
	Nodes int // at least 2
	// Replicas per shard; default min(3, Nodes).
	Replicas int
	Shards   int // 0: the binary's default
	// Pprof makes every node serve /debug/pprof on its HTTP address.
	Pprof bool
	// Flags are more flags of every node's gridnode serve.
	Flags []string
	// Env are more environment variables of every node.
	Env []string
	// TLS, if set, is how to reach the nodes' client ports (they serve
	// TLS: Flags name their certificates).
	TLS *tls.Config
	// Stderr gives node i's (from 0) log writer; nil, or a nil writer,
	// discards it.
	Stderr func(i int) io.Writer
	// Timeout bounds the wait for every node's ready line and a stable map.
	Timeout time.Duration
	// Settle is how long the map's epoch must not change to count as stable.
	Settle time.Duration
	// LeaderWait bounds the wait, after the map is stable, for every shard
	// to be led by its preferred leader (the control leader moves
	// leaderships there every 5 s). Past it the cluster is used as it is,
	// and Spread says so.
	LeaderWait time.Duration
}

// GridCluster is a cluster of "gridnode serve" children on loopback ports,
// each with a fresh data directory.
type GridCluster struct {
	Nodes    []*Gridnode
	Replicas int
	// Epoch is the map's epoch once stable, ShardCount its shards.
	Epoch      uint64
	ShardCount int
	// Spread is "" when every shard is led by its preferred leader, so
	// leaderships are spread as the placement spreads them; else why not.
	Spread string
}

// StartGridCluster starts o.Nodes nodes that form one cluster
// (--bootstrap-expect Nodes, each joining the others' gossip addresses),
// waits for every node's "ready: grpc" line and then until every node
// answers ClusterMap with the same map, unchanged for o.Settle, in which
// every shard has its replicas on active, alive nodes. The nodes fsync
// their Raft logs, as in production. On any failure, and when ctx ends,
// the nodes started are stopped.
func StartGridCluster(ctx context.Context, o GridClusterOptions) (*GridCluster, error) {
	if o.Nodes < 2 {
		return nil, fmt.Errorf("launch: a grid cluster needs at least 2 nodes, not %d", o.Nodes)
	}
	if o.Replicas == 0 {
		o.Replicas = min(3, o.Nodes)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultClusterTimeout
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	if o.LeaderWait == 0 {
		o.LeaderWait = DefaultLeaderWait
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c, err := spawnCluster(o)
	if err != nil {
		return nil, err
	}
	if err := c.start(ctx, o); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// spawnCluster picks the ports and starts the processes.
func spawnCluster(o GridClusterOptions) (*GridCluster, error) {
	type ports struct{ grpc, raft, gossip, http string }
	udp := make([]bool, 4*o.Nodes)
	for i := range o.Nodes {
		udp[4*i+2] = true
	}
	addrs, err := LoopbackAddrs(udp)
	if err != nil {
		return nil, err
	}
	ps := make([]ports, o.Nodes)
	for i := range ps {
		ps[i] = ports{grpc: addrs[4*i], raft: addrs[4*i+1], gossip: addrs[4*i+2], http: addrs[4*i+3]}
	}
	c := &GridCluster{Replicas: o.Replicas}
	for i := range o.Nodes {
		dir, err := os.MkdirTemp("", "bench-gridnode-")
		if err != nil {
			c.Stop()
			return nil, err
		}
		var join []string
		for j := range ps {
			if j != i {
				join = append(join, ps[j].gossip)
			}
		}
		id := fmt.Sprintf("node-%d", i+1)
		args := []string{"serve", "--node-id", id, "--data-dir", dir,
			"--listen", ps[i].grpc, "--raft-listen", ps[i].raft,
			"--gossip-listen", ps[i].gossip, "--http-listen", ps[i].http,
			"--bootstrap-expect", fmt.Sprint(o.Nodes), "--replicas", fmt.Sprint(o.Replicas),
			"--join", strings.Join(join, ","), "--log-level", "warn"}
		args = append(args, commonArgs(o.Shards, o.Pprof, o.Flags)...)
		var stderr io.Writer
		if o.Stderr != nil {
			stderr = o.Stderr(i)
		}
		g, err := spawn(o.Bin, args, o.Env, dir, stderr)
		if err != nil {
			c.Stop()
			return nil, err
		}
		g.ID = id
		c.Nodes = append(c.Nodes, g)
	}
	return c, nil
}

// start waits for the ready lines, then for a stable map.
func (c *GridCluster) start(ctx context.Context, o GridClusterOptions) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, g := range c.Nodes {
		wg.Go(func() { errs[i] = g.waitReady(ctx, o.Timeout) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	conns := make([]gridpb.GridClient, len(c.Nodes))
	for i, g := range c.Nodes {
		creds := insecure.NewCredentials()
		if o.TLS != nil {
			creds = credentials.NewTLS(o.TLS)
		}
		// The launcher's polls are a tool's (gridpb.CallerTool): the
		// nodes leave them out of the client RPC metrics a benchmark reads.
		cc, err := grpc.NewClient(g.Addr, append(gridpb.WithCaller(gridpb.CallerTool), grpc.WithTransportCredentials(creds))...)
		if err != nil {
			return fmt.Errorf("launch: dial %s: %w", g.ID, err)
		}
		defer cc.Close()
		conns[i] = gridpb.NewGridClient(cc)
	}
	ids := make([]string, len(c.Nodes))
	for i, g := range c.Nodes {
		ids[i] = g.ID
	}
	var (
		epoch uint64
		since time.Time
		why   = "no map asked for yet"
		// mapWhy is the last reason the nodes' maps gave, kept when a
		// later round of asking fails: on a loaded machine one node can be
		// slow to answer, and what made the maps unstable says more than
		// that.
		mapWhy string
	)
	for {
		maps, err := c.askMaps(ctx, conns)
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("%w: %s", ErrUnstable, reason(why, mapWhy)) // the last answer's reason, not the timeout's
		case err != nil:
			why = err.Error()
		default:
			why = Unstable(maps, ids)
			mapWhy = why
		}
		switch {
		case why != "":
			since = time.Time{}
		case since.IsZero() || maps[0].GetEpoch() != epoch:
			epoch, since = maps[0].GetEpoch(), time.Now()
		case time.Since(since) >= o.Settle:
			c.Epoch, c.ShardCount = epoch, int(maps[0].GetShardCount())
			c.waitSpread(ctx, conns, o.LeaderWait)
			return nil
		}
		if err := c.pause(ctx); err != nil {
			return fmt.Errorf("%w: %s (%w)", ErrUnstable, reason(why, mapWhy), err)
		}
	}
}

// reason is why a cluster is not stable: the last reason its maps gave,
// when they gave one, else the last round's (a node that did not answer).
func reason(why, mapWhy string) string {
	if mapWhy != "" {
		return mapWhy
	}
	return why
}

// waitSpread waits up to within for every node to report every shard led
// by its preferred leader, and records in c.Spread why not if it gives up.
func (c *GridCluster) waitSpread(ctx context.Context, conns []gridpb.GridClient, within time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		maps, err := c.askMaps(ctx, conns)
		if err == nil {
			c.Spread = notSpread(maps)
		} else {
			c.Spread = err.Error()
		}
		if c.Spread == "" || c.pause(ctx) != nil {
			return
		}
	}
}

func (c *GridCluster) askMaps(ctx context.Context, conns []gridpb.GridClient) ([]*gridpb.ClusterMapResponse, error) {
	maps := make([]*gridpb.ClusterMapResponse, len(conns))
	for i, cl := range conns {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := cl.ClusterMap(cctx, &gridpb.ClusterMapRequest{})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: ClusterMap: %w", c.Nodes[i].ID, err)
		}
		maps[i] = m
	}
	return maps, nil
}

// pause waits a poll interval; it fails when ctx ends or a node exited.
func (c *GridCluster) pause(ctx context.Context) error {
	for _, g := range c.Nodes {
		if g.Exited() {
			return fmt.Errorf("launch: gridnode %s exited: %v", g.ID, g.p.Err())
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(100 * time.Millisecond):
		return nil
	}
}

// Unstable says why the maps the nodes ids answered (in that order) are
// not one settled cluster map, or "" if they are: every node answers, none
// is standalone, all hold the same epoch, every node of ids is in the map,
// active and seen alive, every other node of the map is removed (drained
// earlier), and every one of the map's shards has min(replicas, nodes)
// replicas, all on the nodes.
func Unstable(maps []*gridpb.ClusterMapResponse, ids []string) string {
	if len(maps) != len(ids) || len(maps) == 0 {
		return fmt.Sprintf("%d maps for %d nodes", len(maps), len(ids))
	}
	for i, m := range maps {
		if m.GetStandalone() {
			return ids[i] + " is standalone"
		}
		if m.GetEpoch() != maps[0].GetEpoch() {
			return fmt.Sprintf("maps differ: %s at epoch %d, %s at %d", ids[0], maps[0].GetEpoch(), ids[i], m.GetEpoch())
		}
	}
	m := maps[0]
	seen := map[string]bool{}
	for _, n := range m.GetNodes() {
		in := slices.Contains(ids, n.GetId())
		switch {
		case !in && n.GetState() != "removed":
			return fmt.Sprintf("unknown node %s in the map (%s)", n.GetId(), n.GetState())
		case in && (n.GetState() != "active" || !n.GetAlive()):
			return fmt.Sprintf("node %s is %s (alive %v)", n.GetId(), n.GetState(), n.GetAlive())
		}
		seen[n.GetId()] = in
	}
	for _, id := range ids {
		if !seen[id] {
			return id + " not in the map"
		}
	}
	if m.GetShardCount() == 0 || len(m.GetShards()) != int(m.GetShardCount()) {
		return fmt.Sprintf("%d shards in a map of %d", len(m.GetShards()), m.GetShardCount())
	}
	want := min(int(m.GetReplicas()), len(ids))
	for _, s := range m.GetShards() {
		if len(s.GetReplicas()) != want {
			return fmt.Sprintf("shard %d has %d replicas, want %d", s.GetId(), len(s.GetReplicas()), want)
		}
		for _, r := range s.GetReplicas() {
			if !slices.Contains(ids, r) {
				return fmt.Sprintf("shard %d has a replica on unknown node %s", s.GetId(), r)
			}
		}
	}
	return ""
}

// notSpread says which shard a node sees led by another node than its
// preferred leader (the first replica), or "".
func notSpread(maps []*gridpb.ClusterMapResponse) string {
	for _, m := range maps {
		for _, s := range m.GetShards() {
			if len(s.GetReplicas()) > 0 && s.GetLeader() != s.GetReplicas()[0] {
				return fmt.Sprintf("%s sees shard %d led by %q, not by its preferred leader %s",
					m.GetNodeId(), s.GetId(), s.GetLeader(), s.GetReplicas()[0])
			}
		}
	}
	return ""
}

// Addrs is the nodes' gRPC addresses, comma-separated (what client.Dial
// takes).
func (c *GridCluster) Addrs() string {
	as := make([]string, len(c.Nodes))
	for i, g := range c.Nodes {
		as[i] = g.Addr
	}
	return strings.Join(as, ",")
}

// Stop sends SIGTERM to every node at once (one by one, the last ones
// would lose their quorum and wait out their shutdown timeouts), waits for
// them (killing any still running after 20 s) and removes their data.
func (c *GridCluster) Stop() {
	var wg sync.WaitGroup
	for _, g := range c.Nodes {
		wg.Go(g.Stop)
	}
	wg.Wait()
}

// LoopbackAddrs returns len(udp) distinct loopback addresses whose ports were
// free a moment ago, for TCP and, where udp[i], for UDP too (gossip binds
// both). Every listener stays open until all are chosen, so that no port is
// picked twice.
func LoopbackAddrs(udp []bool) ([]string, error) {
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	out := make([]string, len(udp))
	for i := range out {
		for try := 0; ; try++ {
			if try == 20 {
				return nil, errors.New("launch: no free loopback port for TCP and UDP")
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			held = append(held, l) // held even when UDP fails: not picked again
			addr := l.Addr().String()
			if udp[i] {
				pc, err := net.ListenPacket("udp", addr)
				if err != nil {
					continue
				}
				held = append(held, pc)
			}
			out[i] = addr
			break
		}
	}
	return out, nil
}
