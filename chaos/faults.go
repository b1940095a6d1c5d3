package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/chaos/check"
)

// made is a fault as it happened: its plan, when it started and was
// undone, and how long the cluster took to converge after it.
type made struct {
	planned
	Start   time.Duration `json:"start"` // from the start of the load
	End     time.Duration `json:"end"`   // undone
	Settled time.Duration `json:"settled"`
	// Restarted is when a restart fault's nodes were all started again
	// (from the start of the load); 0 for the other kinds.
	Restarted time.Duration `json:"restarted,omitempty"`
	Target    string        `json:"target"` // the node(s) it hit, resolved
	Err       string        `json:"error,omitempty"`
	Unstable  string        `json:"unstable,omitempty"` // why the cluster had not converged within the bound
	// Unavailable is the longest a consumer was blocked (an operation
	// under way, or failing until it next succeeded) in the fault's
	// window; for a restart fault, counted from Restarted (how long the
	// cluster took to serve again, not the time it was down); set by the
	// report.
	Unavailable time.Duration `json:"unavailable"`
}

// injector makes the faults of a schedule, one at a time.
type injector struct {
	p      *procs
	start  time.Time
	log    func(format string, args ...any)
	gate   *check.Gate
	spare  bool // the spare node is a member now
	mu     sync.Mutex
	done   []made
	active string // the fault under way, for the progress line
	cutOff int    // a node cut off from the others now, -1 when none (follower reads)
}

// settleBound bounds the wait for convergence after each fault.
const settleBound = 90 * time.Second

// run makes the faults of sched until it ends or ctx ends.
func (in *injector) run(ctx context.Context, sched []planned) {
	for _, f := range sched {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(in.start.Add(f.At))):
		}
		m := made{planned: f, Start: time.Since(in.start)}
		in.setActive(f.String())
		in.log("fault %s", f)
		in.gate.Down()
		err := in.make(ctx, &m)
		m.End = time.Since(in.start)
		in.gate.Raise()
		in.setCut(-1)
		if err != nil {
			m.Err = err.Error()
			in.log("fault %s: %v", f, err)
		}
		in.setActive("settling after " + f.Kind)
		if err := in.p.awaitStable(ctx, in.members(), settleBound); err != nil && ctx.Err() == nil {
			m.Unstable = err.Error()
			in.log("after %s: %v", f, err)
		}
		m.Settled = time.Since(in.start) - m.End
		in.log("fault %s: undone at %v, converged %v later", f, m.End.Round(time.Millisecond), m.Settled.Round(time.Millisecond))
		in.setActive("")
		in.mu.Lock()
		in.done = append(in.done, m)
		in.mu.Unlock()
	}
}

func (in *injector) setActive(s string) {
	in.mu.Lock()
	in.active = s
	in.mu.Unlock()
}

func (in *injector) setCut(i int) {
	in.mu.Lock()
	in.cutOff = i
	in.mu.Unlock()
}

// cut is the node cut off now, or -1.
func (in *injector) cut() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cutOff
}

// status is what the progress line shows: the faults made and the one
// under way.
func (in *injector) status() (int, string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.done), in.active
}

// faults are the faults made so far.
func (in *injector) faults() []made {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.done)
}

// members are the nodes in the cluster now.
func (in *injector) members() []*node {
	if in.spare {
		return in.p.nodes[:in.p.cfg.Nodes+1]
	}
	return in.p.members()
}

// hold waits d or until ctx ends.
func hold(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// make makes one fault and undoes it.
func (in *injector) make(ctx context.Context, m *made) error {
	p := in.p
	var n *node
	if m.Node >= 0 && m.Node < len(p.nodes) {
		n = p.nodes[m.Node]
		m.Target = n.id
	}
	switch m.Kind {
	case faultKill:
		n.kill()
		hold(ctx, m.Hold)
		return in.restart(ctx, n, false)
	case faultPause:
		if err := n.pause(); err != nil {
			return err
		}
		hold(ctx, m.Hold)
		return n.resume()
	case faultPartition:
		return in.partition(ctx, m)
	case faultSkew:
		if err := n.setClock(m.Offset); err != nil {
			return err
		}
		hold(ctx, m.Hold)
		return n.setClock(0)
	case faultDisk:
		return in.fillDisk(ctx, n, m.Hold)
	case faultChurn:
		return in.churn(ctx, m)
	case faultRestart:
		return in.restartAll(ctx, m)
	}
	return fmt.Errorf("unknown fault %q", m.Kind)
}

// restart starts n again on its data and waits for its ready line (a node
// whose shards cannot elect yet prints it late; the convergence wait after
// the fault covers the rest).
func (in *injector) restart(ctx context.Context, n *node, fresh bool) error {
	if err := in.p.start(n, fresh); err != nil {
		return err
	}
	if _, err := n.waitReady(ctx, 60*time.Second); err != nil {
		return fmt.Errorf("%s after restart: %w", n.id, err)
	}
	return nil
}

// restartAll kills every member at once, holds, starts them all on their
// data and waits for their ready lines: a full-cluster crash. A node
// prints its ready line only once its shards can elect, which needs the
// others, so all are started before any is waited for.
func (in *injector) restartAll(ctx context.Context, m *made) error {
	m.Target = "every node"
	members := in.members()
	var wg sync.WaitGroup
	for _, n := range members {
		wg.Go(n.kill)
	}
	wg.Wait()
	hold(ctx, m.Hold)
	for _, n := range members {
		if err := in.p.start(n, false); err != nil {
			return err
		}
	}
	m.Restarted = time.Since(in.start)
	errs := make([]error, len(members))
	for i, n := range members {
		wg.Go(func() {
			if _, err := n.waitReady(ctx, 60*time.Second); err != nil {
				errs[i] = fmt.Errorf("%s after restart: %w", n.id, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (in *injector) partition(ctx context.Context, m *made) error {
	lab := in.p.lab
	var err error
	switch m.Variant {
	case "isolate":
		in.setCut(m.Node)
		err = lab.Isolate(m.Node)
	case "split":
		m.Target = fmt.Sprint(nodeNames(m.Group))
		var rest []int
		for i := range in.members() {
			if !slices.Contains(m.Group, i) {
				rest = append(rest, i)
			}
		}
		in.setCut(m.Group[0])
		err = lab.Split(rest, m.Group)
	case "one-way":
		m.Target = fmt.Sprintf("n%d->n%d", m.Node+1, m.Other+1)
		err = lab.Cut(m.Node, m.Other)
	default:
		err = fmt.Errorf("unknown partition %q", m.Variant)
	}
	if err == nil {
		hold(ctx, m.Hold)
	}
	return errors.Join(err, lab.Heal())
}

// fillDisk fills n's data directory (its own tmpfs) until writes fail,
// holds, and frees the space. The node must ride it out: its journal keeps
// room for Raft's terms and votes, refuses new entries until there is
// room again, and takes them once the space is freed, without a restart
// (raftlog.Journal). A node that exits meanwhile is a failure (the
// nodes-stay-up check); it is started again so that the run goes on.
func (in *injector) fillDisk(ctx context.Context, n *node, d time.Duration) error {
	path := filepath.Join(n.dir, "chaos-filler")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	hold(ctx, d)
	if err := os.Remove(path); err != nil {
		return err
	}
	if n.running() == nil {
		return nil
	}
	select {
	case <-n.running().Exited():
		n.kill()
		return errors.Join(fmt.Errorf("%s exited during the full disk", n.id), in.restart(ctx, n, false))
	default:
		return nil
	}
}

// churn changes the membership.
func (in *injector) churn(ctx context.Context, m *made) error {
	p := in.p
	switch m.Variant {
	case "rolling-restart":
		m.Target = "every node"
		for _, n := range in.members() {
			n.stop(20 * time.Second)
			if err := in.restart(ctx, n, false); err != nil {
				return err
			}
			if err := p.awaitStable(ctx, in.members(), settleBound); err != nil {
				return err
			}
		}
		return nil
	case "control-leader-kill":
		n := p.controlLeader(ctx)
		if n == nil {
			return errors.New("no control leader known")
		}
		m.Target = n.id
		n.kill()
		hold(ctx, m.Hold)
		return in.restart(ctx, n, false)
	case "join-drain", "kill-during-move":
		spare := p.nodes[m.Node]
		m.Target = spare.id
		if err := os.RemoveAll(spare.dir); err != nil && !p.cfg.has(faultDisk) {
			return err
		}
		_ = os.MkdirAll(spare.dir, 0o755)
		in.spare = true
		if err := p.start(spare, true); err != nil {
			return err
		}
		if m.Variant == "kill-during-move" {
			if err := in.killControlLeaderDuringMove(ctx); err != nil {
				return err
			}
		}
		if err := p.awaitStable(ctx, in.members(), settleBound); err != nil {
			return fmt.Errorf("after %s joined: %w", spare.id, err)
		}
		// The placement moves replicas onto the new node: wait until it
		// holds one, so that the drain has shards to move off it.
		if err := in.awaitReplica(ctx, spare); err != nil {
			return err
		}
		if err := p.awaitStable(ctx, in.members(), settleBound); err != nil {
			return fmt.Errorf("after replicas moved onto %s: %w", spare.id, err)
		}
		if err := in.drain(ctx, spare, m.Variant == "kill-during-move"); err != nil {
			return err
		}
		spare.stop(20 * time.Second)
		in.spare = false
		return nil
	}
	return fmt.Errorf("unknown churn %q", m.Variant)
}

// awaitReplica waits until the map gives n a replica.
func (in *injector) awaitReplica(ctx context.Context, n *node) error {
	deadline := time.Now().Add(settleBound)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if m, err := in.p.members()[0].clusterMap(ctx); err == nil {
			for _, sh := range m.GetShards() {
				if slices.Contains(sh.GetReplicas(), n.id) {
					return nil
				}
			}
		}
		hold(ctx, 250*time.Millisecond)
	}
	return fmt.Errorf("no replica moved onto %s within %v of its join", n.id, settleBound)
}

// killControlLeaderDuringMove waits until a shard's group differs from
// its map replicas (a move under way), kills the control leader, and
// restarts it.
func (in *injector) killControlLeaderDuringMove(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && in.p.unstable(ctx, in.members()) == "" {
		hold(ctx, 50*time.Millisecond)
	}
	n := in.p.controlLeader(ctx)
	if n == nil {
		return errors.New("no control leader known during the move")
	}
	in.log("control leader %s killed during the move", n.id)
	n.kill()
	hold(ctx, time.Second)
	return in.restart(ctx, n, false)
}

// drain drains n and waits until the map says it is removed; with
// killLeader, the control leader is killed while the drain moves shards.
func (in *injector) drain(ctx context.Context, n *node, killLeader bool) error {
	var via *node
	for _, o := range in.p.members() {
		if o != n && o.running() != nil {
			via = o
			break
		}
	}
	c, err := via.client()
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = c.Drain(dctx, &gridpb.DrainRequest{NodeId: []byte(n.id)})
	cancel()
	if err != nil {
		return fmt.Errorf("drain %s: %w", n.id, err)
	}
	if killLeader {
		if err := in.killControlLeaderDuringMove(ctx); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(settleBound)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		m, err := via.clusterMap(ctx)
		if err == nil {
			for _, cn := range m.GetNodes() {
				if cn.GetId() == n.id && cn.GetState() == "removed" {
					return nil
				}
			}
		}
		hold(ctx, 250*time.Millisecond)
	}
	return fmt.Errorf("%s not removed within %v of its drain", n.id, settleBound)
}
