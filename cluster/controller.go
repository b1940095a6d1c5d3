package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/raftlog"
)

// The controller: this node's member of the control group (its Raft, on
// the node's Mux and log store, with Control as its FSM), and what only
// the group's leader may do with it: tell the current map's epoch,
// propose commands and drain nodes. The leader's reconciler and move
// executor are in reconcile.go and execute.go; bootstrap.go forms the
// group.

// ControlGroup is the Raft group id of the control group on every node's
// Mux and log store; shard groups use ids below MaxShards.
const ControlGroup uint64 = 1 << 40

// raftLogger is the control group's Raft logger: the node's, at warn,
// quiet about peers once the node stops (raftlog.Mux.MarkStopping).
func (n *Runtime) raftLogger() hclog.Logger {
	return raftlog.RaftLogger(n.cfg.Logger, "raft", n.cfg.Mux.Stopping).With("group", "control")
}

func (n *Runtime) startControl() error {
	cfg := n.cfg
	trans, err := raftlog.NewTransport(cfg.Mux, ControlGroup, raftlog.TransportConfig{})
	if err != nil {
		return err
	}
	snaps, err := raftlog.OpenSnapshots(cfg.SnapshotDir, ControlGroup, 2, n.raftLogger())
	if err != nil {
		_ = trans.Close()
		return err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	raftlog.SetTimeouts(rc, cfg.HeartbeatTimeout)
	rc.SnapshotThreshold = 1024
	rc.Logger = n.raftLogger()
	n.store = cfg.Logs.Group(ControlGroup)
	if err := raftlog.TrimLogBehindSnapshot(n.store, snaps); err != nil {
		_ = trans.Close()
		return fmt.Errorf("cluster: control group: %w", err)
	}
	r, err := raft.NewRaft(rc, n.ctl, n.store, n.store, snaps, trans)
	if err != nil {
		_ = trans.Close()
		return fmt.Errorf("cluster: control group: %w", err)
	}
	n.raft, n.trans, n.snaps = r, trans, snaps
	return nil
}

func (n *Runtime) stopControl() {
	if err := n.raft.Shutdown().Error(); err != nil {
		n.cfg.Logger.Warn("control group shutdown", "err", err)
	}
	_ = n.trans.Close()
}

// ControlLeader is the control group's leader as this node knows it.
func (n *Runtime) ControlLeader() topology.NodeID {
	_, id := n.raft.LeaderWithID()
	return topology.NodeID(id)
}

// ControlTerm is the latest term of the control group this node knows.
// Every node is a voter or non-voter of the control group, so it hears of
// each new term from the group's leader.
func (n *Runtime) ControlTerm() uint64 { return n.raft.CurrentTerm() }

// ControlState is this node's standing in the control group: leader,
// follower, candidate, nonvoter (a member that does not vote), none (not a
// member yet) or shutdown.
func (n *Runtime) ControlState() string {
	st := n.raft.State()
	if st == raft.Follower {
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			return "unknown"
		}
		for _, s := range f.Configuration().Servers {
			if s.ID == raft.ServerID(n.cfg.ID) {
				if s.Suffrage != raft.Voter {
					return "nonvoter"
				}
				return "follower"
			}
		}
		return "none"
	}
	return map[raft.RaftState]string{raft.Leader: "leader", raft.Candidate: "candidate", raft.Shutdown: "shutdown"}[st]
}

// CurrentEpoch is the epoch of the current map, known only to the control
// group's leader once it has applied every entry committed before its
// term (a barrier, applied here if none has been in this term yet): it
// fails elsewhere. Other nodes ask the leader for it (Remote.ControlEpoch)
// before they act on their map, so the leader answers them by itself,
// whatever its own loops are busy with.
func (n *Runtime) CurrentEpoch(ctx context.Context) (uint64, error) {
	if err := n.catchUp(ctx); err != nil {
		return 0, err
	}
	m := n.ctl.Map()
	if m == nil {
		return 0, errors.New("no map yet")
	}
	if n.leadTerm.Load() != n.raft.CurrentTerm() {
		return 0, errors.New("this node's control leadership is changing")
	}
	return m.Epoch, nil
}

// catchUp makes sure this node, leading the control group, has applied a
// barrier in its current term: every entry committed before the term is
// then applied, and its map is the current one. Callers that find none
// share one barrier, which goes on when a caller's ctx ends. It fails
// with ErrNotControlLeader on a follower.
func (n *Runtime) catchUp(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("%w (leader: %q)", topology.ErrNotControlLeader, n.ControlLeader())
	}
	term := n.raft.CurrentTerm()
	if n.leadTerm.Load() == term {
		return nil
	}
	n.barrierMu.Lock()
	b := n.barrier
	if b == nil || b.term != term {
		select {
		case <-n.quit:
			n.barrierMu.Unlock()
			return fmt.Errorf("%w: the node is stopping", topology.ErrNotControlLeader)
		default:
		}
		b = &termBarrier{term: term, done: make(chan struct{})}
		n.barrier = b
		f := n.raft.Barrier(barrierTimeout)
		// Close waits for this goroutine before it shuts Raft down: a
		// future still queued for the FSM when Raft shuts down is never
		// answered (hashicorp/raft 1.7.2 drops them), while a running
		// Raft answers every one, by its commit or by the loss of the
		// leadership (within the leader lease when quorum is gone).
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			b.err = f.Error()
			if b.err == nil {
				n.leadTerm.Store(term)
			}
			close(b.done)
			n.barrierMu.Lock()
			if n.barrier == b && b.err != nil {
				n.barrier = nil // the next caller tries again
			}
			n.barrierMu.Unlock()
		}()
	}
	n.barrierMu.Unlock()
	select {
	case <-b.done:
		if b.err != nil {
			return fmt.Errorf("barrier: %w", b.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("barrier: %w", ctx.Err())
	}
}

// termBarrier is a barrier on its way in a control term (catchUp).
type termBarrier struct {
	term uint64
	done chan struct{}
	err  error // set before done is closed
}

// barrierTimeout bounds how long a barrier may wait to enter the log.
const barrierTimeout = 5 * time.Second

// propose commits cmd through the control group; it must lead.
func (n *Runtime) propose(ctx context.Context, cmd topology.Command) (uint64, error) {
	b, err := cmd.MarshalBinary()
	if err != nil {
		return 0, err
	}
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	f := n.raft.Apply(b, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, fmt.Errorf("%w: %w", topology.ErrNotControlLeader, err)
		}
		return 0, fmt.Errorf("cluster: propose %v: %w", cmd.Type, err)
	}
	res := f.Response().(ApplyResult)
	return res.Epoch, res.Err
}

// Drain marks node id draining: the planner moves its replicas away, then
// the node is removed from the map. Only the control leader can. Unless
// force, it refuses (ErrUnderReplicated, wrapped with ErrRejected) to
// drain an active node when the other active nodes are fewer than the
// map's replica count: the shards could not keep their replicas.
func (n *Runtime) Drain(ctx context.Context, id topology.NodeID, force bool) (topology.DrainStatus, error) {
	if n.raft.State() != raft.Leader {
		return topology.DrainStatus{}, fmt.Errorf("%w (leader: %q)", topology.ErrNotControlLeader, n.ControlLeader())
	}
	m := n.Map()
	if m == nil {
		return topology.DrainStatus{}, fmt.Errorf("%w: cluster not bootstrapped yet", topology.ErrRejected)
	}
	if info, ok := m.Nodes[id]; !ok {
		return topology.DrainStatus{}, fmt.Errorf("%w: no node %q in the map", topology.ErrRejected, id)
	} else if info.State == topology.NodeActive {
		if left := activeNodes(m) - 1; !force && left < m.Replicas {
			return topology.DrainStatus{}, fmt.Errorf("%w: %w: draining %s leaves %d active nodes for %d replicas per shard, so every shard it holds would keep only %d; add a node first, or force the drain (gridnode drain --force)",
				topology.ErrRejected, topology.ErrUnderReplicated, id, left, m.Replicas, left)
		}
		if _, err := n.propose(ctx, topology.Command{Type: topology.CmdNodeDrain, ID: id}); err != nil {
			return topology.DrainStatus{}, err
		}
		n.poke()
	}
	m = n.Map()
	st := topology.DrainStatus{Node: id, State: m.Nodes[id].State, Epoch: m.Epoch}
	for _, set := range m.ShardReplicas {
		if slices.Contains(set, id) {
			st.ReplicasLeft++
		}
	}
	return st, nil
}

// activeNodes counts the map's active nodes.
func activeNodes(m *topology.Map) int {
	k := 0
	for _, info := range m.Nodes {
		if info.State == topology.NodeActive {
			k++
		}
	}
	return k
}
