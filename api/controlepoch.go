package api

import (
	"context"
	"fmt"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
)

// ControlEpoch asks the node at addr for the current map's epoch with the
// ClusterMap RPC, which carries it only from the control group's leader
// once it has caught up (cluster.Runtime.CurrentEpoch). Any other answer is
// topology.ErrNotControlLeader.
func (p *Peers) ControlEpoch(ctx context.Context, addr string) (uint64, error) {
	c, err := p.client(addr)
	if err != nil {
		return 0, err
	}
	resp, err := c.ClusterMap(p.asNode(ctx), &gridpb.ClusterMapRequest{})
	if err != nil {
		return 0, fmt.Errorf("api: current epoch from %s: %w", addr, err)
	}
	if e := resp.GetCurrentEpoch(); e != 0 {
		return e, nil
	}
	return 0, fmt.Errorf("%w: %s (%s) does not lead the control group, or has not caught up with it yet (it names %q)",
		topology.ErrNotControlLeader, resp.GetNodeId(), addr, resp.GetControlLeader())
}
