package main

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client"
)

// mapServer answers ClusterMap with a fixed map, as a node whose control
// log is at that map would.
type mapServer struct {
	gridpb.UnimplementedGridServer
	resp *gridpb.ClusterMapResponse
}

func (m *mapServer) ClusterMap(context.Context, *gridpb.ClusterMapRequest) (*gridpb.ClusterMapResponse, error) {
	return m.resp, nil
}

func serveMap(t *testing.T, resp *gridpb.ClusterMapResponse) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	gridpb.RegisterGridServer(srv, &mapServer{resp: resp})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestFreshestMap: status reports the control leader's map when it is
// newer than the dialled node's (a follower applies the control log a
// moment after the leader: a drain the leader answered as removed must
// show as removed), and the dialled node's map otherwise, or when the
// leader does not answer.
func TestFreshestMap(t *testing.T) {
	leaderMap := func(epoch uint64, state string) *gridpb.ClusterMapResponse {
		return &gridpb.ClusterMapResponse{Epoch: epoch, NodeId: "node-2", ControlLeader: "node-2", ShardCount: 1, Replicas: 1,
			Nodes: []*gridpb.ClusterNode{{Id: "node-2", State: "active"}, {Id: "node-3", State: state}}}
	}
	dialled := func(leaderAddr string) client.ClusterMap {
		return client.ClusterMap{Epoch: 9, NodeID: "node-1", ControlLeader: "node-2", ShardCount: 1, Replicas: 1,
			Nodes: []client.ClusterNode{{ID: "node-1", State: "active"}, {ID: "node-2", State: "active", GRPCAddr: leaderAddr},
				{ID: "node-3", State: "draining"}}}
	}
	ctx := context.Background()

	newer := serveMap(t, leaderMap(10, "removed"))
	if m := freshestMap(ctx, dialled(newer)); m.NodeID != "node-2" || m.Epoch != 10 || m.Nodes[1].State != "removed" {
		t.Errorf("with the leader at a newer epoch: the map of %s at epoch %d, %+v; want node-2's at 10", m.NodeID, m.Epoch, m.Nodes)
	}
	same := serveMap(t, leaderMap(9, "draining"))
	if m := freshestMap(ctx, dialled(same)); m.NodeID != "node-1" || m.Epoch != 9 {
		t.Errorf("with the leader at the same epoch: the map of %s at epoch %d; want node-1's", m.NodeID, m.Epoch)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := lis.Addr().String()
	lis.Close()
	if m := freshestMap(ctx, dialled(gone)); m.NodeID != "node-1" || m.Epoch != 9 {
		t.Errorf("with the leader not answering: the map of %s at epoch %d; want node-1's", m.NodeID, m.Epoch)
	}
	self := dialled(newer)
	self.ControlLeader = "node-1"
	if m := freshestMap(ctx, self); m.NodeID != "node-1" {
		t.Errorf("dialled node leading: the map of %s; want its own", m.NodeID)
	}
}
