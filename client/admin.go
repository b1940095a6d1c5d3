package client

import (
	"context"

	"github.com/l4xg/grid/api/gridpb"
)

// DrainStatus is where the drain of a node stands (the Drain RPC).
type DrainStatus struct {
	NodeID string
	// State is the node's state in the cluster map: draining while it
	// still holds replicas, removed once it holds none.
	State string
	// ReplicasLeft is how many shard replicas the node still holds.
	ReplicasLeft int
	// Epoch is the epoch of the cluster map the answer was read from.
	Epoch uint64
}

// Drain asks the cluster to move every replica off node nodeID and then
// remove it from the cluster map; "" means the node the client dialled (the
// first address given to Dial). The request goes to that node, which takes
// it to the control group's leader. It returns at once with the node's
// state: call it again (it is idempotent) to follow the drain until the
// state is removed. A standalone node refuses it (gRPC FailedPrecondition),
// as the cluster does a node it does not know (NotFound); both are
// returned as they came, readable with status.Code.
func (c *Client) Drain(ctx context.Context, nodeID string, opts ...DrainOption) (DrainStatus, error) {
	req := &gridpb.DrainRequest{NodeId: []byte(nodeID)}
	for _, o := range opts {
		o(req)
	}
	var resp *gridpb.DrainResponse
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.seed.rpc.Drain(ctx, req)
		return err
	})
	if err != nil {
		return DrainStatus{}, err
	}
	return DrainStatus{NodeID: resp.GetNodeId(), State: resp.GetState(), ReplicasLeft: int(resp.GetReplicasLeft()), Epoch: resp.GetEpoch()}, nil
}

// DrainOption tunes a Drain request.
type DrainOption func(*gridpb.DrainRequest)

// DrainForce drains the node even when the remaining active nodes are
// fewer than the cluster's replica count: without it the cluster refuses
// such a drain (FailedPrecondition), since every shard the node holds
// would then run with fewer replicas.
func DrainForce() DrainOption {
	return func(r *gridpb.DrainRequest) { r.Force = true }
}
