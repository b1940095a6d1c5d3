package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/l4xg/grid/client"
)

const (
	// drainPoll is how often drain --wait asks how far the drain has come.
	drainPoll = 250 * time.Millisecond
	// drainAskTimeout bounds one node's answer to one poll.
	drainAskTimeout = 2 * time.Second
)

// drainJSON is the JSON shape of drain's answer.
type drainJSON struct {
	NodeID       string `json:"node_id"`
	State        string `json:"state"`
	ReplicasLeft int    `json:"replicas_left"`
	Epoch        uint64 `json:"map_epoch"`
}

func bindDrain(fs *flag.FlagSet) func() (cliCustom, error) {
	node := fs.String("node", "", "id of the node to drain (default: the node --addr points at)")
	wait := fs.Bool("wait", false, "wait until the node is removed from the cluster map (within --timeout)")
	force := fs.Bool("force", false, "drain even when the remaining nodes are fewer than the replica count (the shards then run under-replicated)")
	return func() (cliCustom, error) {
		return func(ctx context.Context, c *client.Client, o cliOutput) int {
			return runDrain(ctx, c, o, *node, *wait, *force)
		}, nil
	}
}

// runDrain asks for the drain and, with wait, follows it until the node is
// removed from the map.
func runDrain(ctx context.Context, c *client.Client, o cliOutput, node string, wait, force bool) int {
	var opts []client.DrainOption
	if force {
		opts = append(opts, client.DrainForce())
	}
	st, err := c.Drain(ctx, node, opts...)
	if err != nil {
		return o.fail(fmt.Errorf("drain %s: %w", orSelf(node), err), cliExitCode(err))
	}
	if !wait || st.State == "removed" {
		return o.drained(st)
	}
	o.progress(st)
	p, err := newDrainPoller(ctx, c, st.NodeID)
	if err != nil {
		return o.fail(fmt.Errorf("drain %s: follow: %w", st.NodeID, err), cliExitCode(err))
	}
	defer p.close()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	var lastErr error
	for st.State != "removed" {
		select {
		case <-ctx.Done():
			err := fmt.Errorf("drain %s: still %s with %d replicas left at the end of --timeout", st.NodeID, st.State, st.ReplicasLeft)
			if lastErr != nil {
				err = fmt.Errorf("%w (last error: %w)", err, lastErr)
			}
			return o.fail(err, exitUnreachable)
		case <-tick.C:
		}
		next, err := p.poll(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		if next.State != "removed" && (next.State != st.State || next.ReplicasLeft != st.ReplicasLeft) {
			o.progress(next)
		}
		st = next
	}
	return o.drained(st)
}

func orSelf(node string) string {
	if node == "" {
		return "(the node at --addr)"
	}
	return node
}

// drainPoller asks the cluster how the drain of one node stands. Drain is
// idempotent and any node answers it from the control leader's map, so it
// asks the dialled node and, should that fail (the drained node itself,
// removed, no longer knows the control leader), the others of the map.
type drainPoller struct {
	node   string
	first  *client.Client // the dialled node, unless it is the one drained
	others []string       // the gRPC addresses of the other nodes
	last   *client.Client // the dialled node when it is the one drained
	conns  map[string]*client.Client
}

func newDrainPoller(ctx context.Context, c *client.Client, node string) (*drainPoller, error) {
	m, err := c.ClusterMap(ctx)
	if err != nil {
		return nil, err
	}
	p := &drainPoller{node: node, conns: map[string]*client.Client{}}
	if m.NodeID != node {
		p.first = c
	} else {
		p.last = c
	}
	for _, n := range m.Nodes {
		if n.ID != node && n.ID != m.NodeID && n.State != "removed" && n.GRPCAddr != "" {
			p.others = append(p.others, n.GRPCAddr)
		}
	}
	return p, nil
}

// poll asks one node after the other until one answers.
func (p *drainPoller) poll(ctx context.Context) (client.DrainStatus, error) {
	var errs []error
	ask := func(c *client.Client) (client.DrainStatus, bool) {
		// A node that hangs must not hold up the others.
		askCtx, cancel := context.WithTimeout(ctx, drainAskTimeout)
		defer cancel()
		st, err := c.Drain(askCtx, p.node)
		errs = append(errs, err)
		return st, err == nil
	}
	if p.first != nil {
		if st, ok := ask(p.first); ok {
			return st, nil
		}
	}
	for _, addr := range p.others {
		c, err := p.conn(ctx, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st, ok := ask(c); ok {
			return st, nil
		}
	}
	if p.last != nil {
		if st, ok := ask(p.last); ok {
			return st, nil
		}
	}
	return client.DrainStatus{}, errors.Join(errs...)
}

// conn is a client of the node at addr, opened once; asked once per poll.
func (p *drainPoller) conn(ctx context.Context, addr string) (*client.Client, error) {
	if c := p.conns[addr]; c != nil {
		return c, nil
	}
	c, err := dialOnce(ctx, addr)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

func (p *drainPoller) close() {
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// progress prints one line of a drain being followed (not with --json,
// which prints the final state only).
func (o cliOutput) progress(st client.DrainStatus) {
	if !o.json {
		fmt.Fprintf(o.stdout, "node %s: %s, %d replicas left (map epoch %d)\n", st.NodeID, st.State, st.ReplicasLeft, st.Epoch)
	}
}

// drained prints the final answer of drain.
func (o cliOutput) drained(st client.DrainStatus) int {
	if o.json {
		return o.writeJSON(drainJSON{NodeID: st.NodeID, State: st.State, ReplicasLeft: st.ReplicasLeft, Epoch: st.Epoch})
	}
	o.progress(st)
	return exitOK
}
