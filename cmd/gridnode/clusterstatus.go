package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client"
)

// gridnode status against a cluster member: the cluster map as the dialled
// node holds it, or the control leader's when that one is newer, and the
// health of every shard replica from the Status of
// every node in the map, asked in parallel within --timeout. A replica's
// role (voter, non-voter, not a member) is taken from its group's
// configuration as the shard's leader reports it, or from the replica's
// own view when the leader did not answer. A replica's lag is its shard
// leader's commit index minus the replica's applied index; the Statuses are
// taken at slightly different moments, so a small lag under load is noise
// and a negative one is shown as 0. A replica outside its group has no lag:
// it receives no log.

// Replica health as status shows it.
const (
	healthLeader    = "leader"
	healthFollower  = "follower" // a voter; its lag is unknown without the leader's Status
	healthNonvoter  = "nonvoter" // a member that does not vote (catching up)
	healthNotMember = "not a member"
	healthCandidate = "candidate"
	healthDown      = "down"     // the node did not answer its Status
	healthMissing   = "starting" // the node answered but runs no replica of the shard yet
)

// Replica roles in their group's configuration.
const (
	roleVoter     = "voter"
	roleNonvoter  = "nonvoter"
	roleNotMember = "not a member"
)

// clusterStatusJSON is the JSON shape of a cluster's status (and the data
// the tables are printed from).
type clusterStatusJSON struct {
	// NodeID is the node that answered the map.
	NodeID        string             `json:"node_id"`
	Epoch         uint64             `json:"map_epoch"`
	ControlLeader string             `json:"control_leader"`
	Slots         int                `json:"slots"`
	ShardCount    int                `json:"shard_count"`
	Replicas      int                `json:"replicas"`
	Nodes         []clusterNodeJSON  `json:"nodes"`
	Shards        []clusterShardJSON `json:"shards"`
}

type clusterNodeJSON struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Alive    bool   `json:"alive"`
	GRPCAddr string `json:"grpc_addr"`
	Replicas int    `json:"replicas"`
	Leads    int    `json:"leads"`
	// ControlState is the node's role in the control group, from its own
	// Status; Error is why its Status could not be had.
	ControlState string `json:"control_state,omitempty"`
	// Ready is the node's readiness (its /readyz), from its own Status;
	// nil without it.
	Ready *bool  `json:"ready,omitempty"`
	Error string `json:"error,omitempty"`
	// Clock is the clock column: the node's offset to its peers and
	// whether it is within the bound ("" without its Status).
	Clock string `json:"clock,omitempty"`
	cliClockJSON
	// ClockNotes name the shards it leads whose stamps are ahead of its
	// clock by more than the bound (they grant no lease).
	ClockNotes []string `json:"clock_notes,omitempty"`
	// DiskFull: the node's disk is below its reserve (it refuses new keys
	// and leads no shard while a replica elsewhere has room); nil without
	// its Status.
	DiskFull *bool `json:"disk_full,omitempty"`
}

type clusterShardJSON struct {
	ID       uint32               `json:"id"`
	Leader   string               `json:"leader"` // "" when no replica leads
	Replicas []clusterReplicaJSON `json:"replicas"`
	// Group is the group's configuration as the leader reports it (empty
	// without a leader's answer), at ConfigIndex, committed or not.
	Group           []clusterMemberJSON `json:"group"`
	ConfigIndex     uint64              `json:"config_index,omitempty"`
	ConfigCommitted bool                `json:"config_committed"`
}

type clusterMemberJSON struct {
	ID    string `json:"id"`
	Voter bool   `json:"voter"`
}

type clusterReplicaJSON struct {
	Node   string `json:"node"`
	Health string `json:"health"`
	// Role is voter, nonvoter or "not a member"; "" when unknown (no
	// replica, or an older node that does not say).
	Role string `json:"role,omitempty"`
	// Lag is set for a follower whose leader answered.
	Lag          *uint64 `json:"lag,omitempty"`
	AppliedIndex uint64  `json:"applied_index,omitempty"`
	CommitIndex  uint64  `json:"commit_index,omitempty"`
}

// nodeAnswer is one node's Status, or why there is none.
type nodeAnswer struct {
	st  client.Status
	err error
}

// runStatus prints the status of the node at addr or, when it is a cluster
// member, of its cluster.
func runStatus(ctx context.Context, c *client.Client, addr string, o cliOutput) int {
	self, err := c.Status(ctx)
	if err != nil {
		return o.fail(fmt.Errorf("grid at %s: %w", addr, err), cliExitCode(err))
	}
	m, err := c.ClusterMap(ctx)
	switch {
	case err != nil && self.MapEpoch == 0 && self.ControlState == "":
		// Not a cluster member by its Status: an older standalone node.
		return o.status(self)
	case err != nil:
		return o.fail(fmt.Errorf("node %s at %s is a cluster member but gave no cluster map (not bootstrapped yet?): %w",
			self.NodeID, addr, err), cliExitCode(err))
	case m.Standalone:
		return o.status(self)
	}
	j := buildClusterStatus(freshestMap(ctx, m), fetchStatuses(ctx, m, self))
	if o.json {
		return o.writeJSON(j)
	}
	return o.clusterTables(j)
}

// freshestMap is the map status reports: the dialled node's, unless the
// control leader it names holds a newer one. A follower applies the control
// log a moment after the leader, so a change the leader has already
// answered for (a drain that reported "removed") may not be in the dialled
// node's map yet; status shows the newest map it can reach, and the
// report names whose it is. The leader is asked once; should it not answer,
// the dialled node's map stands.
func freshestMap(ctx context.Context, m client.ClusterMap) client.ClusterMap {
	if m.ControlLeader == "" || m.ControlLeader == m.NodeID {
		return m
	}
	i := slices.IndexFunc(m.Nodes, func(n client.ClusterNode) bool { return n.ID == m.ControlLeader })
	if i < 0 || m.Nodes[i].GRPCAddr == "" {
		return m
	}
	c, err := dialOnce(ctx, m.Nodes[i].GRPCAddr)
	if err != nil {
		return m
	}
	defer c.Close()
	lm, err := c.ClusterMap(ctx)
	if err != nil || lm.Standalone || lm.Epoch <= m.Epoch {
		return m
	}
	return lm
}

// fetchStatuses asks every node of the map that is not removed for its
// Status, in parallel; self is reused for the node that gave it.
func fetchStatuses(ctx context.Context, m client.ClusterMap, self client.Status) map[string]nodeAnswer {
	out := map[string]nodeAnswer{self.NodeID: {st: self}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range m.Nodes {
		if n.ID == self.NodeID || n.State == "removed" || n.GRPCAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := nodeStatus(ctx, n.GRPCAddr)
			mu.Lock()
			out[n.ID] = nodeAnswer{st: st, err: err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// nodeStatus is the Status of the node at addr, asked once: a node that does
// not answer is down for this report, not worth a retry.
func nodeStatus(ctx context.Context, addr string) (client.Status, error) {
	c, err := dialOnce(ctx, addr)
	if err != nil {
		return client.Status{}, err
	}
	defer c.Close()
	return c.Status(ctx)
}

// dialOnce is a client of the node at addr alone, whose calls are tried
// once and are the status tool's (gridpb.CallerTool).
func dialOnce(ctx context.Context, addr string) (*client.Client, error) {
	return client.Dial(ctx, addr, client.WithoutRouting(), client.WithBatching(false),
		client.WithRetryPolicy(client.RetryPolicy{Attempts: 1}), client.WithDialOptions(gridpb.WithCaller(gridpb.CallerTool)...))
}

// buildClusterStatus joins the map and the nodes' Statuses.
func buildClusterStatus(m client.ClusterMap, answers map[string]nodeAnswer) clusterStatusJSON {
	j := clusterStatusJSON{
		NodeID: m.NodeID, Epoch: m.Epoch, ControlLeader: m.ControlLeader, Slots: m.Slots,
		ShardCount: m.ShardCount, Replicas: m.Replicas, Nodes: []clusterNodeJSON{}, Shards: []clusterShardJSON{},
	}
	shards := slices.Clone(m.Shards)
	slices.SortFunc(shards, func(a, b client.ClusterShard) int { return int(a.ID) - int(b.ID) })
	leads := map[string]int{}
	replicas := map[string]int{}
	for _, sh := range shards {
		s := shardHealth(sh, answers)
		if s.Leader != "" {
			leads[s.Leader]++
		}
		for _, id := range sh.Replicas {
			replicas[id]++
		}
		j.Shards = append(j.Shards, s)
	}
	nodes := slices.Clone(m.Nodes)
	slices.SortFunc(nodes, func(a, b client.ClusterNode) int { return strings.Compare(a.ID, b.ID) })
	for _, n := range nodes {
		nj := clusterNodeJSON{ID: n.ID, State: n.State, Alive: n.Alive, GRPCAddr: n.GRPCAddr,
			Replicas: replicas[n.ID], Leads: leads[n.ID]}
		if a, ok := answers[n.ID]; ok {
			if a.err != nil {
				nj.Error = a.err.Error()
			} else {
				nj.ControlState = a.st.ControlState
				ready := a.st.Ready
				nj.Ready = &ready
				nj.Clock, nj.cliClockJSON = clockLabel(a.st), clockJSON(a.st)
				full := a.st.DiskFull
				nj.DiskFull = &full
				if l := clockLines(a.st); len(l) > 1 {
					nj.ClockNotes = l[1:]
				}
			}
		}
		j.Nodes = append(j.Nodes, nj)
	}
	return j
}

// shardHealth describes one shard: its leader, as its replicas report it,
// its group as the leader reports it, and each replica's role, health and
// lag.
func shardHealth(sh client.ClusterShard, answers map[string]nodeAnswer) clusterShardJSON {
	local := map[string]client.ShardStatus{} // the replica on each node that answered
	for _, id := range sh.Replicas {
		if a, ok := answers[id]; ok && a.err == nil {
			for _, s := range a.st.Shards {
				if s.ID == sh.ID {
					local[id] = s
				}
			}
		}
	}
	// The leader is the replica that says it leads, with the highest term
	// (a deposed leader cut off from the others may not know yet).
	leader := ""
	for _, id := range sh.Replicas {
		if s, ok := local[id]; ok && s.RaftState == "Leader" && (leader == "" || s.Term > local[leader].Term) {
			leader = id
		}
	}
	out := clusterShardJSON{ID: sh.ID, Leader: leader, Replicas: []clusterReplicaJSON{}, Group: []clusterMemberJSON{}}
	if leader != "" {
		l := local[leader]
		for _, m := range l.Group {
			out.Group = append(out.Group, clusterMemberJSON{ID: m.ID, Voter: m.Voter})
		}
		out.ConfigIndex, out.ConfigCommitted = l.ConfigIndex, l.ConfigCommitted
	}
	for _, id := range sh.Replicas {
		r := clusterReplicaJSON{Node: id}
		s, ok := local[id]
		r.Role = replicaRole(id, s, leader, local[leader])
		switch a, asked := answers[id]; {
		case !asked || a.err != nil:
			r.Health = healthDown
		case !ok:
			r.Health = healthMissing
		case id == leader:
			r.Health = healthLeader
		case s.RaftState == "Candidate":
			r.Health = healthCandidate
		case r.Role == roleNotMember:
			r.Health = healthNotMember
		default:
			r.Health = healthFollower
			if r.Role == roleNonvoter {
				r.Health = healthNonvoter
			}
			if leader != "" {
				lag := local[leader].CommitIndex - min(s.AppliedIndex, local[leader].CommitIndex)
				r.Lag = &lag
			}
		}
		if ok {
			r.AppliedIndex, r.CommitIndex = s.AppliedIndex, s.CommitIndex
		}
		out.Replicas = append(out.Replicas, r)
	}
	return out
}

// replicaRole is the role of node id's replica s (zero when it did not
// answer) in its group: by the configuration its leader (lst, on node
// leader) reports, else by the replica's own view; "" when neither says
// (no answer, or older nodes).
func replicaRole(id string, s client.ShardStatus, leader string, lst client.ShardStatus) string {
	group, suffrage := s.Group, s.Suffrage
	if leader != "" && lst.Suffrage != "" {
		group, suffrage = lst.Group, "none"
		for _, m := range group {
			if m.ID == id {
				suffrage = roleNonvoter
				if m.Voter {
					suffrage = roleVoter
				}
			}
		}
	}
	switch suffrage {
	case "voter":
		return roleVoter
	case "nonvoter":
		return roleNonvoter
	case "none":
		return roleNotMember
	}
	return ""
}

// clusterTables prints a cluster's status as a NODES and a SHARDS table.
func (o cliOutput) clusterTables(j clusterStatusJSON) int {
	fmt.Fprintf(o.stdout, "map epoch %d  control leader %s  slots %d  shards %d  replicas %d  (map of %s)\n\nNODES\n",
		j.Epoch, orDash(j.ControlLeader), j.Slots, j.ShardCount, j.Replicas, j.NodeID)
	tw := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tALIVE\tREADY\tGRPC ADDR\tREPLICAS\tLEADS\tCLOCK\tDISK")
	for _, n := range j.Nodes {
		alive := "yes"
		if !n.Alive {
			alive = "no"
		}
		ready, disk := "-", "-" // no Status from the node
		if n.Ready != nil {
			ready = map[bool]string{true: "yes", false: "no"}[*n.Ready]
		}
		if n.DiskFull != nil {
			disk = map[bool]string{true: "below reserve", false: "ok"}[*n.DiskFull]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", n.ID, n.State, alive, ready, orDash(n.GRPCAddr), n.Replicas, n.Leads, orDash(n.Clock), disk)
	}
	if code := o.flush(tw); code != exitOK {
		return code
	}
	fmt.Fprintln(o.stdout, "\nSHARDS")
	tw = tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tLEADER\tREPLICAS\tGROUP (LEADER'S VIEW)")
	for _, sh := range j.Shards {
		parts := make([]string, len(sh.Replicas))
		for i, r := range sh.Replicas {
			parts[i] = fmt.Sprintf("%s (%s)", r.Node, replicaLabel(r))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", sh.ID, orDash(sh.Leader), strings.Join(parts, " "), groupLabel(sh))
	}
	if code := o.flush(tw); code != exitOK {
		return code
	}
	for _, n := range j.Nodes {
		if n.Error != "" {
			fmt.Fprintf(o.stdout, "\n%s: no status: %s\n", n.ID, n.Error)
		}
		for _, l := range n.ClockNotes {
			fmt.Fprintf(o.stdout, "\n%s: %s\n", n.ID, l)
		}
	}
	return exitOK
}

// replicaLabel is what the SHARDS table says of a replica: "leader",
// "lag 3", "nonvoter, lag 40", "not a member", "down", ...
func replicaLabel(r clusterReplicaJSON) string {
	switch {
	case r.Health == healthFollower && r.Lag != nil:
		return "lag " + strconv.FormatUint(*r.Lag, 10)
	case r.Health == healthNonvoter && r.Lag != nil:
		return "nonvoter, lag " + strconv.FormatUint(*r.Lag, 10)
	}
	return r.Health
}

// groupLabel is what the SHARDS table says of a shard's group: its members
// as the leader reports them, non-voters marked, and "uncommitted" while
// the leader's latest configuration is not committed yet; "-" without it.
func groupLabel(sh clusterShardJSON) string {
	if len(sh.Group) == 0 {
		return "-"
	}
	parts := make([]string, len(sh.Group))
	for i, m := range sh.Group {
		parts[i] = m.ID
		if !m.Voter {
			parts[i] += "(nonvoter)"
		}
	}
	label := strings.Join(parts, " ")
	if !sh.ConfigCommitted {
		label += " [uncommitted]"
	}
	return label
}
