package launch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/l4xg/grid/api/gridpb"
)

// fakeClusterNode is a cluster member as far as StartGridCluster can tell:
// it writes its arguments to $BENCH_FAKE_ARGS_DIR/<node-id>, serves
// ClusterMap on --listen with a map of --bootstrap-expect nodes (node-1..)
// and 4 shards of --replicas replicas each (one replica for shard 0 with
// BENCH_FAKE_MAP=short), prints its ready lines and stops at SIGTERM.
func fakeClusterNode(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	id := fs.String("node-id", "", "")
	listen := fs.String("listen", "", "")
	httpListen := fs.String("http-listen", "", "")
	expect := fs.Int("bootstrap-expect", 0, "")
	replicas := fs.Int("replicas", 0, "")
	for _, f := range []string{"data-dir", "raft-listen", "gossip-listen", "join", "log-level", "shards"} {
		fs.String(f, "", "")
	}
	fs.Bool("pprof", false, "")
	if len(args) == 0 || args[0] != "serve" || fs.Parse(args[1:]) != nil {
		return 4
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("BENCH_FAKE_ARGS_DIR"), *id), []byte(strings.Join(args, " ")), 0o644); err != nil {
		return 3
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return 5
	}
	srv := grpc.NewServer()
	gridpb.RegisterGridServer(srv, fakeMapServer{id: *id, nodes: *expect, replicas: *replicas, short: os.Getenv("BENCH_FAKE_MAP") == "short"})
	go func() { _ = srv.Serve(lis) }()
	fmt.Println("ready: http " + *httpListen)
	fmt.Println("ready: grpc " + lis.Addr().String())
	<-sig
	srv.Stop()
	return 0
}

type fakeMapServer struct {
	gridpb.UnimplementedGridServer
	id              string
	nodes, replicas int
	short           bool
}

func (f fakeMapServer) ClusterMap(context.Context, *gridpb.ClusterMapRequest) (*gridpb.ClusterMapResponse, error) {
	m := &gridpb.ClusterMapResponse{Epoch: 7, Slots: 4096, ShardCount: 4, Replicas: uint32(f.replicas), NodeId: f.id}
	for i := range f.nodes {
		m.Nodes = append(m.Nodes, &gridpb.ClusterNode{Id: fmt.Sprintf("node-%d", i+1), State: "active", Alive: true})
	}
	for s := range 4 {
		sh := &gridpb.ClusterShard{Id: uint32(s)}
		for r := range f.replicas {
			sh.Replicas = append(sh.Replicas, fmt.Sprintf("node-%d", (s+r)%f.nodes+1))
		}
		if f.short && s == 0 {
			sh.Replicas = sh.Replicas[:1]
		}
		sh.Leader = sh.Replicas[0]
		m.Shards = append(m.Shards, sh)
	}
	return m, nil
}

// flagOf is the value following name in args, "" if absent.
func flagOf(args []string, name string) string {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func TestGridClusterFormsOnDistinctPortsAndStops(t *testing.T) {
	argsDir := t.TempDir()
	t.Setenv("BENCH_FAKE_GRIDNODE", "cluster")
	t.Setenv("BENCH_FAKE_ARGS_DIR", argsDir)
	c, err := StartGridCluster(context.Background(), GridClusterOptions{Bin: os.Args[0], Nodes: 4, Shards: 4, Pprof: true, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nodes) != 4 || c.Replicas != 3 || c.Epoch != 7 || c.ShardCount != 4 || c.Spread != "" {
		t.Fatalf("cluster %d nodes, replicas %d, epoch %d, shards %d, spread %q", len(c.Nodes), c.Replicas, c.Epoch, c.ShardCount, c.Spread)
	}
	if got := strings.Split(c.Addrs(), ","); len(got) != 4 || got[0] != c.Nodes[0].Addr {
		t.Fatalf("Addrs %q", c.Addrs())
	}
	var dirs []string
	ports := map[string]string{}
	gossip := map[string]string{}
	for i, g := range c.Nodes {
		dirs = append(dirs, g.dir)
		b, err := os.ReadFile(filepath.Join(argsDir, g.ID))
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Fields(string(b))
		if g.ID != fmt.Sprintf("node-%d", i+1) || flagOf(args, "--data-dir") != g.dir ||
			flagOf(args, "--bootstrap-expect") != "4" || flagOf(args, "--replicas") != "3" ||
			flagOf(args, "--shards") != "4" || !slices.Contains(args, "--pprof") || flagOf(args, "--listen") != g.Addr {
			t.Errorf("%s: args %v", g.ID, args)
		}
		for _, f := range []string{"--listen", "--raft-listen", "--gossip-listen", "--http-listen"} {
			a := flagOf(args, f)
			if !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") || ports[a] != "" {
				t.Errorf("%s %s %q: not a fixed loopback port, or one used twice (%s)", g.ID, f, a, ports[a])
			}
			ports[a] = g.ID + " " + f
		}
		gossip[g.ID] = flagOf(args, "--gossip-listen")
	}
	// Each node joins every other node's gossip address, and not its own.
	for _, g := range c.Nodes {
		b, _ := os.ReadFile(filepath.Join(argsDir, g.ID))
		join := strings.Split(flagOf(strings.Fields(string(b)), "--join"), ",")
		for id, a := range gossip {
			if slices.Contains(join, a) != (id != g.ID) {
				t.Errorf("%s joins %v; %s's gossip address is %s", g.ID, join, id, a)
			}
		}
	}
	c.Stop()
	for i, g := range c.Nodes {
		if !g.Exited() {
			t.Errorf("%s still running after Stop", g.ID)
		}
		if _, err := os.Stat(dirs[i]); !os.IsNotExist(err) {
			t.Errorf("%s: data dir left after Stop: %v", g.ID, err)
		}
	}
}

// A map in which a shard lacks replicas never counts as stable: the start
// fails with ErrUnstable naming the shard, and no node is left running.
func TestGridClusterUnstableMapFailsAndStopsNodes(t *testing.T) {
	argsDir := t.TempDir()
	t.Setenv("BENCH_FAKE_GRIDNODE", "cluster")
	t.Setenv("BENCH_FAKE_ARGS_DIR", argsDir)
	t.Setenv("BENCH_FAKE_MAP", "short")
	_, err := StartGridCluster(context.Background(), GridClusterOptions{Bin: os.Args[0], Nodes: 3, Timeout: 2 * time.Second})
	if !errors.Is(err, ErrUnstable) || !strings.Contains(err.Error(), "shard 0 has 1 replicas, want 3") {
		t.Fatalf("err %v", err)
	}
	// The goleak check of TestMain sees the waiters of the nodes gone:
	// Stop waited for every process.
}

func TestGridClusterChildExitFails(t *testing.T) {
	t.Setenv("BENCH_FAKE_GRIDNODE", "exit")
	_, err := StartGridCluster(context.Background(), GridClusterOptions{Bin: os.Args[0], Nodes: 2, Timeout: 20 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "node-1 exited before ready") || !strings.Contains(err.Error(), "node-2 exited before ready") {
		t.Fatalf("err %v", err)
	}
}

func TestGridClusterNeedsTwoNodes(t *testing.T) {
	if _, err := StartGridCluster(context.Background(), GridClusterOptions{Bin: os.Args[0], Nodes: 1}); err == nil {
		t.Fatal("a one-node cluster started")
	}
}

func TestUnstable(t *testing.T) {
	ids := []string{"a", "b", "c"}
	good := func() *gridpb.ClusterMapResponse {
		m := &gridpb.ClusterMapResponse{Epoch: 3, ShardCount: 2, Replicas: 3}
		for _, id := range ids {
			m.Nodes = append(m.Nodes, &gridpb.ClusterNode{Id: id, State: "active", Alive: true})
		}
		m.Shards = []*gridpb.ClusterShard{{Id: 0, Replicas: []string{"a", "b", "c"}}, {Id: 1, Replicas: []string{"b", "a", "c"}}}
		return m
	}
	three := func(f func(m *gridpb.ClusterMapResponse)) []*gridpb.ClusterMapResponse {
		ms := []*gridpb.ClusterMapResponse{good(), good(), good()}
		f(ms[2])
		return ms
	}
	if why := Unstable(three(func(*gridpb.ClusterMapResponse) {}), ids); why != "" {
		t.Fatalf("a settled map: %s", why)
	}
	for want, f := range map[string]func(m *gridpb.ClusterMapResponse){
		"c is standalone":                   func(m *gridpb.ClusterMapResponse) { m.Standalone = true },
		"maps differ: a at epoch 3, c at 4": func(m *gridpb.ClusterMapResponse) { m.Epoch = 4 },
	} {
		if why := Unstable(three(f), ids); why != want {
			t.Errorf("%q, want %q", why, want)
		}
	}
	for want, f := range map[string]func(m *gridpb.ClusterMapResponse){
		"node b is draining (alive true)":         func(m *gridpb.ClusterMapResponse) { m.Nodes[1].State = "draining" },
		"node c is active (alive false)":          func(m *gridpb.ClusterMapResponse) { m.Nodes[2].Alive = false },
		"c not in the map":                        func(m *gridpb.ClusterMapResponse) { m.Nodes = m.Nodes[:2] },
		"unknown node x in the map (active)":      func(m *gridpb.ClusterMapResponse) { m.Nodes[2].Id = "x" },
		"1 shards in a map of 2":                  func(m *gridpb.ClusterMapResponse) { m.Shards = m.Shards[:1] },
		"shard 1 has 2 replicas, want 3":          func(m *gridpb.ClusterMapResponse) { m.Shards[1].Replicas = []string{"a", "b"} },
		"shard 0 has a replica on unknown node z": func(m *gridpb.ClusterMapResponse) { m.Shards[0].Replicas[2] = "z" },
	} {
		ms := []*gridpb.ClusterMapResponse{good()}
		f(ms[0])
		ms = append(ms, ms[0], ms[0])
		if why := Unstable(ms, ids); why != want {
			t.Errorf("%q, want %q", why, want)
		}
	}
	// A node drained earlier stays in the map as removed: settled.
	drained := good()
	drained.Nodes = append(drained.Nodes, &gridpb.ClusterNode{Id: "d", State: "removed"})
	if why := Unstable([]*gridpb.ClusterMapResponse{drained, drained, drained}, ids); why != "" {
		t.Errorf("a map with a removed node: %s", why)
	}
	// Two nodes and three replicas per shard: two replicas are all there can be.
	m := good()
	m.Nodes = m.Nodes[:2]
	m.Shards = []*gridpb.ClusterShard{{Id: 0, Replicas: []string{"a", "b"}}, {Id: 1, Replicas: []string{"b", "a"}}}
	m.ShardCount = 2
	if why := Unstable([]*gridpb.ClusterMapResponse{m, m}, ids[:2]); why != "" {
		t.Errorf("two nodes: %s", why)
	}
	if why := notSpread([]*gridpb.ClusterMapResponse{m}); !strings.Contains(why, "shard 0 led by \"\"") {
		t.Errorf("notSpread: %q", why)
	}
	m.Shards[0].Leader, m.Shards[1].Leader = "a", "b"
	if why := notSpread([]*gridpb.ClusterMapResponse{m}); why != "" {
		t.Errorf("notSpread: %q", why)
	}
}

// With BENCH_GRIDNODE_BIN set to a built gridnode (go build -o /tmp/gridnode
// ./cmd/gridnode), a real 3-node cluster forms, serves its map and stops
// (about 7 s here; building the binary inside the test would take longer
// than the rest of the package's tests together).
func TestGridClusterOfRealNodes(t *testing.T) {
	bin := os.Getenv("BENCH_GRIDNODE_BIN")
	if bin == "" {
		t.Skip("BENCH_GRIDNODE_BIN not set")
	}
	var logs strings.Builder
	sw := &syncWriter{w: &logs} // one lock for the three nodes' copiers
	c, err := StartGridCluster(context.Background(), GridClusterOptions{Bin: bin, Nodes: 3, Shards: 4,
		Stderr: func(int) io.Writer { return sw }})
	if err != nil {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		t.Fatalf("%v\nlogs:\n%s", err, logs.String())
	}
	if c.Epoch == 0 || c.ShardCount != 4 || c.Replicas != 3 {
		t.Errorf("epoch %d shards %d replicas %d", c.Epoch, c.ShardCount, c.Replicas)
	}
	t.Logf("stable at epoch %d; spread: %q", c.Epoch, c.Spread)
	start := time.Now()
	c.Stop()
	for _, g := range c.Nodes {
		if !g.Exited() {
			t.Errorf("%s still running", g.ID)
		}
	}
	t.Logf("stopped in %v", time.Since(start))
}

// syncWriter serialises the writes of the nodes' log copiers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
