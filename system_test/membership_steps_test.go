package system_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/internal/testwait"
)

// do runs one step; the run loop settles and checks after it.
func (r *memberRun) do(st step) error {
	switch st.Kind {
	case stepJoin:
		return r.join(st.Node)
	case stepDrain:
		if err := r.startDrain(st.Node); err != nil {
			return err
		}
		return r.finishDrain(st.Node)
	case stepDrainRefused:
		return r.drainRefused(st.Node)
	case stepKill:
		i, err := r.resolve(st.Node)
		if err != nil {
			return err
		}
		return r.kill(i)
	case stepRestart:
		r.c.Restart(st.Node)
		return nil
	case stepKillControlMidMove:
		return r.killControlMidMove(st)
	case stepIsolate:
		i, err := r.resolve(st.Node)
		if err != nil {
			return err
		}
		return r.isolate(i, st.Net)
	}
	return fmt.Errorf("unknown step %v", st)
}

// resolve turns a step's node into an index: controlLeader is the node
// leading the control group now.
func (r *memberRun) resolve(node int) (int, error) {
	if node != controlLeader {
		return node, nil
	}
	i, err := r.awaitControlLeader(-1)
	if err == nil {
		r.logf("the control leader is %s", r.c.ID(i))
	}
	return i, err
}

// awaitControlLeader waits up to 15 s until a running node other than
// not leads the control group, and returns it.
func (r *memberRun) awaitControlLeader(not int) (int, error) {
	i := -1
	if !testwait.Holds(15*time.Second, func() bool { i = r.c.ControlLeader(not); return i >= 0 }) {
		return -1, errors.New("no control leader after 15 s")
	}
	return i, nil
}

func (r *memberRun) join(want int) error {
	if i := r.c.Add(); i != want {
		return fmt.Errorf("the harness gave the new node index %d, the plan %d", i, want)
	}
	// The step is over once the map lists the node: from then on the
	// planner owes it its share, which settle waits for.
	id := topology.NodeID(r.c.ID(want))
	active := func() bool { m := r.c.Map(); return m != nil && m.Nodes[id].State == topology.NodeActive }
	if !testwait.Holds(30*time.Second, active) {
		return fmt.Errorf("%s started but is not active in the map after 30 s", id)
	}
	r.logf("%s joined the map", id)
	return nil
}

// drain asks for the drain of node i as an operator would: the Drain RPC
// of a running node other than i, which takes it to the control leader.
// An unavailable cluster is asked again (up to 30 s); any other error is
// the cluster's answer.
func (r *memberRun) drain(i int) (client.DrainStatus, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := r.drainOnce(i)
		if err == nil || !errors.Is(err, client.ErrUnavailable) || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *memberRun) drainOnce(i int) (client.DrainStatus, error) {
	via := -1
	for j := range r.c.Addrs() {
		if j != i && r.c.Node(j) != nil {
			via = j
			break
		}
	}
	if via < 0 {
		return client.DrainStatus{}, errors.New("no other node runs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, r.c.Addrs()[via], client.WithoutRouting())
	if err != nil {
		return client.DrainStatus{}, err
	}
	defer cl.Close()
	return cl.Drain(ctx, r.c.ID(i))
}

func (r *memberRun) startDrain(i int) error {
	st, err := r.drain(i)
	if err != nil {
		return fmt.Errorf("drain of %s: %w", r.c.ID(i), err)
	}
	r.logf("drain of %s accepted: %s, %d replicas left, epoch %d", r.c.ID(i), st.State, st.ReplicasLeft, st.Epoch)
	return nil
}

// finishDrain waits until the map says node i is removed, then stops it
// for good.
func (r *memberRun) finishDrain(i int) error {
	id := topology.NodeID(r.c.ID(i))
	var m *topology.Map
	if !testwait.Holds(settleTimeout, func() bool { m = r.c.Map(); return m != nil && m.Nodes[id].State == topology.NodeRemoved }) {
		return fmt.Errorf("%s not removed after %v (map epoch %d: %v)", id, settleTimeout, m.Epoch, m.Nodes[id].State)
	}
	r.c.Stop(i)
	r.logf("%s removed from the map and stopped", id)
	return nil
}

// drainRefused asks to drain node i while exactly R nodes are active: the
// cluster must refuse, and the node must stay active in the map.
func (r *memberRun) drainRefused(i int) error {
	st, err := r.drain(i)
	if err == nil {
		return fmt.Errorf("drain of %s with %d active nodes and R = %d was accepted (%s, %d replicas left): it must be refused (issue 10 defect 9)",
			r.c.ID(i), memberLimits.Replicas, memberLimits.Replicas, st.State, st.ReplicasLeft)
	}
	r.logf("drain of %s refused: %v", r.c.ID(i), err)
	if m := r.c.Map(); m.Nodes[topology.NodeID(r.c.ID(i))].State != topology.NodeActive {
		return fmt.Errorf("the drain of %s was refused (%v) but the map says %v", r.c.ID(i), err, m.Nodes[topology.NodeID(r.c.ID(i))].State)
	}
	return nil
}

// led is what node i leads: shards, and whether the control group.
type led struct {
	node    int
	shards  []int
	control bool
}

func (r *memberRun) ledBy(i int) led {
	l := led{node: i, control: r.c.ControlLeader(-1) == i}
	m := r.c.Map()
	for s := range m.ShardReplicas {
		if slices.Contains(r.c.Leaders(s), i) {
			l.shards = append(l.shards, s)
		}
	}
	return l
}

// elsewhere reports whether other nodes lead everything l.node led.
func (r *memberRun) elsewhere(l led) bool {
	for _, s := range l.shards {
		if !slices.ContainsFunc(r.c.Leaders(s), func(j int) bool { return j != l.node }) {
			return false
		}
	}
	return !l.control || r.c.ControlLeader(l.node) >= 0
}

// holdUnder lets the load run under a fault: it waits until others lead
// what l.node led (up to 15 s), lets the history workers that saw an
// unknown outcome go on, then waits until holdOps more history operations
// have ended (up to holdMax).
func (r *memberRun) holdUnder(l led) {
	r.holdUntil(func() bool { return r.elsewhere(l) },
		fmt.Sprintf("others lead what %s led (shards %v, control %v)", r.c.ID(l.node), l.shards, l.control))
}

// holdUntil is holdUnder with the condition cond, described by what.
func (r *memberRun) holdUntil(cond func() bool, what string) {
	start := time.Now()
	if testwait.Holds(15*time.Second, cond) {
		r.logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
	} else {
		r.logf("not yet after %v: %s", time.Since(start).Round(time.Millisecond), what)
	}
	r.hist.g.Raise()
	from := r.hist.done.Load()
	testwait.Holds(holdMax, func() bool { return r.hist.done.Load()-from >= holdOps })
}

func (r *memberRun) kill(i int) error {
	l := r.ledBy(i)
	r.logf("killing %s (leads shards %v, control %v)", r.c.ID(i), l.shards, l.control)
	r.c.Kill(i)
	r.holdUnder(l)
	if err := r.c.StartNodes(i); err != nil {
		return err
	}
	r.logf("%s started again", r.c.ID(i))
	return nil
}

// netFaults cuts one kind of traffic between the nodes, which Heal
// restores.
type netFaults func(groups ...[]int)

// netFaults returns what cuts traffic k.
func (r *memberRun) netFaults(k netKind) netFaults {
	switch k {
	case netRaft:
		return r.c.PartitionRaft
	case netGossip:
		return r.c.PartitionGossip
	default:
		return r.c.Partition
	}
}

func (r *memberRun) isolate(i int, k netKind) error {
	partition := r.netFaults(k)
	var rest []int
	for j := range r.c.Addrs() {
		if j != i {
			rest = append(rest, j)
		}
	}
	l := r.ledBy(i)
	r.logf("cutting %s off (%v; leads shards %v, control %v)", r.c.ID(i), k, l.shards, l.control)
	partition(rest)
	if k == netGossip { // Raft goes on: the others see the node fail
		id := topology.NodeID(r.c.ID(i))
		r.holdUntil(func() bool { return r.nobodySees(id) }, fmt.Sprintf("no other node sees %s alive", id))
	} else {
		r.holdUnder(l)
	}
	r.c.Heal()
	r.logf("healed")
	return nil
}

// nobodySees reports whether no running node but id sees id alive by
// gossip.
func (r *memberRun) nobodySees(id topology.NodeID) bool {
	for j := range r.c.Addrs() {
		if n := r.c.Node(j); n != nil && topology.NodeID(r.c.ID(j)) != id && n.Cluster().Alive()[id] {
			return false
		}
	}
	return true
}

// killControlMidMove starts st.Move, waits (up to 30 s) until a shard's
// group differs from its map replicas, kills the control leader, starts
// it again once another node leads the control group, and lets the move
// finish (a drained node is stopped once removed).
func (r *memberRun) killControlMidMove(st step) error {
	var err error
	if st.Move == stepJoin {
		err = r.join(st.Node)
	} else {
		err = r.startDrain(st.Node)
	}
	if err != nil {
		return err
	}
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	moving := r.c.MovingShards()
	for len(moving) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		moving = r.c.MovingShards()
	}
	ctl, err := r.awaitControlLeader(-1)
	if err != nil {
		return err
	}
	if len(moving) > 0 {
		r.logf("shards %v moving after %v: killing the control leader %s", moving, time.Since(start).Round(time.Millisecond), r.c.ID(ctl))
	} else {
		r.logf("no move seen within 30 s: killing the control leader %s anyway", r.c.ID(ctl))
	}
	if st.Move == stepDrain && ctl == st.Node {
		// The draining node leads the control group. Killed, it may be
		// removed before it is back, and a removed node never serves:
		// it is started without waiting for it, then stopped once the
		// map says it is removed.
		l := r.ledBy(ctl)
		r.logf("killing %s (leads shards %v, control %v), which is draining", r.c.ID(ctl), l.shards, l.control)
		r.c.Kill(ctl)
		r.holdUnder(l)
		if err := r.c.Launch(ctl); err != nil {
			return err
		}
		r.logf("%s started again", r.c.ID(ctl))
		return r.finishDrain(st.Node)
	}
	if err := r.kill(ctl); err != nil {
		return err
	}
	if st.Move == stepDrain {
		return r.finishDrain(st.Node)
	}
	return nil
}
