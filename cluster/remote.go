package cluster

import (
	"context"

	"github.com/l4xg/grid/cluster/topology"
)

// Remote reaches other nodes on their client (gRPC) address. The control
// leader uses it to execute placement moves on the shards' leaders. Package
// api implements it over gRPC.
type Remote interface {
	// ShardAdmin runs req on the node at addr, which must lead req.Shard;
	// it returns the shard's commit index once the change is committed.
	// A node that does not lead the shard fails with ErrNotShardLeader.
	ShardAdmin(ctx context.Context, addr string, req topology.AdminRequest) (uint64, error)
	// ShardStatus returns what the node at addr says about its replica of
	// shard; ok is false when it holds none.
	ShardStatus(ctx context.Context, addr string, shard int) (st topology.ReplicaStatus, ok bool, err error)
	// ControlEpoch asks the node at addr for the current map's epoch
	// (Node.CurrentEpoch); it fails, wrapping ErrNotControlLeader, unless
	// that node leads the control group and has applied every entry
	// committed before its term.
	ControlEpoch(ctx context.Context, addr string) (uint64, error)
}
