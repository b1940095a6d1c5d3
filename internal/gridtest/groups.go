package gridtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/testwait"
)

// Group is a shard group's Raft configuration as the node leading the
// shard reports it in its Status (gridpb.ShardStatus: group, config_index,
// config_committed).
type Group struct {
	Shard  int
	Leader int // index of the node that leads the shard and reported it
	// Members is the configuration, sorted by id; ConfigIndex its log
	// index and Committed whether the leader has committed that index.
	Members     []topology.GroupMember
	ConfigIndex uint64
	Committed   bool
	// Reported is false when the leader's Status carries no configuration
	// (a server from before the field): Members are then the leader's
	// latest configuration read in-process, whose commitment is unknown,
	// and Committed is false.
	Reported bool
}

// Voters are the ids of the group's voters, sorted.
func (g Group) Voters() []topology.NodeID {
	var out []topology.NodeID
	for _, m := range g.Members {
		if m.Voter {
			out = append(out, m.ID)
		}
	}
	slices.Sort(out)
	return out
}

func (g Group) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "shard %d led by %s: [", g.Shard, fmt.Sprintf("node-%d", g.Leader+1))
	for i, m := range g.Members {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(string(m.ID))
		if !m.Voter {
			b.WriteString("(nonvoter)")
		}
	}
	switch {
	case !g.Reported:
		fmt.Fprintf(&b, "] latest, commitment not reported")
	case g.Committed:
		fmt.Fprintf(&b, "] committed at %d", g.ConfigIndex)
	default:
		fmt.Fprintf(&b, "] at %d, not committed", g.ConfigIndex)
	}
	return b.String()
}

// LeaderGroup returns shard s's configuration as the running node that
// leads it reports it. It fails when no running node leads the shard or
// the leader does not answer.
func (c *Cluster) LeaderGroup(ctx context.Context, s int) (Group, error) {
	ls := c.Leaders(s)
	if len(ls) == 0 {
		return Group{}, fmt.Errorf("gridtest: shard %d has no leader", s)
	}
	var err error
	for _, i := range ls {
		var g Group
		if g, err = c.reportedGroup(ctx, i, s); err == nil {
			return g, nil
		}
	}
	return Group{}, err
}

// reportedGroup asks node i for its Status and returns its replica's view
// of shard s's group; it must lead the shard.
func (c *Cluster) reportedGroup(ctx context.Context, i, s int) (Group, error) {
	n := c.Node(i)
	if n == nil {
		return Group{}, fmt.Errorf("gridtest: %s is down", c.ID(i))
	}
	conn, err := c.conn(n.Addr())
	if err != nil {
		return Group{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := gridpb.NewGridClient(conn).Status(ctx, &gridpb.StatusRequest{})
	if err != nil {
		return Group{}, fmt.Errorf("gridtest: status of %s: %w", c.ID(i), err)
	}
	for _, st := range resp.GetShards() {
		if int(st.GetId()) != s {
			continue
		}
		if st.GetRaftState() != raft.Leader.String() {
			return Group{}, fmt.Errorf("gridtest: %s no longer leads shard %d (%s)", c.ID(i), s, st.GetRaftState())
		}
		g := Group{Shard: s, Leader: i, ConfigIndex: st.GetConfigIndex(), Committed: st.GetConfigCommitted()}
		for _, m := range st.GetGroup() {
			g.Members = append(g.Members, topology.GroupMember{ID: topology.NodeID(m.GetId()), Voter: m.GetVoter()})
		}
		g.Reported = len(g.Members) > 0
		if !g.Reported {
			if g.Members, err = c.localGroup(i, s); err != nil {
				return Group{}, err
			}
		}
		sort.Slice(g.Members, func(a, b int) bool { return g.Members[a].ID < g.Members[b].ID })
		return g, nil
	}
	return Group{}, fmt.Errorf("gridtest: %s holds no replica of shard %d", c.ID(i), s)
}

// localGroup is the latest configuration of node i's replica of shard s,
// read in-process.
func (c *Cluster) localGroup(i, s int) ([]topology.GroupMember, error) {
	n := c.Node(i)
	if n == nil {
		return nil, fmt.Errorf("gridtest: %s is down", c.ID(i))
	}
	r := n.Host().Replica(s)
	if r == nil {
		return nil, fmt.Errorf("gridtest: %s holds no replica of shard %d", c.ID(i), s)
	}
	servers, err := r.Configuration()
	if err != nil {
		return nil, err
	}
	out := make([]topology.GroupMember, 0, len(servers))
	for _, srv := range servers {
		out = append(out, topology.GroupMember{ID: topology.NodeID(srv.ID), Voter: srv.Suffrage == raft.Voter})
	}
	return out, nil
}

// conn returns the cached client connection to addr. Its calls are a
// tool's (gridpb.CallerTool): the cluster's watcher, not one of its
// clients.
func (c *Cluster) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	opts := append(gridpb.WithCaller(gridpb.CallerTool), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if tok := c.opts.AuthToken; tok != "" {
		opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), method, req, reply, cc, o...)
		}))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("gridtest: dial %s: %w", addr, err)
	}
	if c.conns == nil {
		c.conns = map[string]*grpc.ClientConn{}
	}
	c.conns[addr] = cc
	return cc, nil
}

func (c *Cluster) closeConns() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.conns {
		_ = cc.Close()
	}
	c.conns = nil
}

// groupMatches reports why shard s's group, as its leader reports it, is
// not exactly the map's replica set set as voters ("" when it is): a move
// may be half done. The configuration must be committed when the leader
// says whether it is; a non-voter, a member the map does not list or a map
// replica missing from the group are mismatches.
func (c *Cluster) groupMatches(s int, set []topology.NodeID) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	g, err := c.LeaderGroup(ctx, s)
	if err != nil {
		return err.Error()
	}
	if g.Reported && !g.Committed {
		return g.String()
	}
	want := slices.Clone(set)
	slices.Sort(want)
	if len(g.Voters()) != len(g.Members) || !slices.Equal(g.Voters(), want) {
		return fmt.Sprintf("%s; map %v", g, set)
	}
	return ""
}

// Describe is the cluster's state for a failure message: each node's map
// epoch, readiness and control standing; the map (nodes, replica sets);
// each shard's group as its leader reports it.
func (c *Cluster) Describe() string {
	var b strings.Builder
	c.mu.Lock()
	nodes := slices.Clone(c.nodes)
	c.mu.Unlock()
	for i, cn := range nodes {
		n := c.Node(i)
		if n == nil {
			fmt.Fprintf(&b, "%s: down\n", cn.id)
			continue
		}
		cl := n.Cluster()
		epoch := uint64(0)
		if m := cl.Map(); m != nil {
			epoch = m.Epoch
		}
		fmt.Fprintf(&b, "%s: up, map epoch %d, ready %v, control %s (leader %q), replicas %v\n",
			cn.id, epoch, cl.Ready(), cl.ControlState(), cl.ControlLeader(), c.localReplicas(i))
	}
	m := c.Map()
	if m == nil {
		b.WriteString("no map\n")
		return b.String()
	}
	fmt.Fprintf(&b, "map epoch %d, %d replicas per shard\n", m.Epoch, m.Replicas)
	ids := make([]string, 0, len(m.Nodes))
	for id := range m.Nodes {
		ids = append(ids, string(id))
	}
	slices.Sort(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, "  node %s %v\n", id, m.Nodes[topology.NodeID(id)].State)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for s, set := range m.ShardReplicas {
		fmt.Fprintf(&b, "  shard %d: map %v; ", s, set)
		if g, err := c.LeaderGroup(ctx, s); err != nil {
			fmt.Fprintf(&b, "%v\n", err)
		} else {
			fmt.Fprintf(&b, "%v\n", g)
		}
	}
	return b.String()
}

// localReplicas lists the shards node i runs a replica of, with its Raft
// state.
func (c *Cluster) localReplicas(i int) []string {
	n := c.Node(i)
	if n == nil {
		return nil
	}
	var out []string
	for _, r := range n.Host().Replicas() {
		st := r.Status()
		out = append(out, fmt.Sprintf("%d:%s", st.ID, st.RaftState))
	}
	return out
}

// ControlLeader returns the index of a running node other than not (-1:
// any node) that leads the control group by its own account, or -1. Right
// after a partition a cut-off leader may still count itself: the first is
// returned.
func (c *Cluster) ControlLeader(not int) int {
	for i := range c.Addrs() {
		if n := c.Node(i); n != nil && i != not && n.Cluster().ControlState() == "leader" {
			return i
		}
	}
	return -1
}

// WaitControlLeader waits up to timeout for ControlLeader(not) and
// returns it.
func (c *Cluster) WaitControlLeader(timeout time.Duration, not int) int {
	c.t.Helper()
	idx := -1
	testwait.Until(c.t, timeout, func() string {
		if idx = c.ControlLeader(not); idx >= 0 {
			return ""
		}
		if not >= 0 {
			return fmt.Sprintf("no control leader but node %d", not)
		}
		return "no control leader"
	})
	return idx
}

// MovingShards returns the shards whose replica set in the map differs
// from the voters of the latest configuration of the replica leading the
// shard, or whose group has a non-voter: a move is half done. Shards
// without a leader are left out. It reads the replicas in-process.
func (c *Cluster) MovingShards() []int {
	m := c.Map()
	if m == nil {
		return nil
	}
	var out []int
	for s, set := range m.ShardReplicas {
		ls := c.Leaders(s)
		if len(ls) == 0 {
			continue
		}
		members, err := c.localGroup(ls[0], s)
		if err != nil {
			continue
		}
		g := Group{Members: members}
		want := slices.Clone(set)
		slices.Sort(want)
		if len(g.Voters()) != len(members) || !slices.Equal(g.Voters(), want) {
			out = append(out, s)
		}
	}
	return out
}
