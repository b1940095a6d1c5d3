package api

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
)

// Peers is a pool of client connections to the other nodes of a cluster,
// one per gRPC address, created on first use and kept until Close. The
// server forwards operations through it, and it is the cluster.Remote the
// control leader executes placement moves with. Safe for concurrent use.
type Peers struct {
	creds  credentials.TransportCredentials
	token  string // this node's bearer token for its own calls ("" with auth off)
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

// errPeersClosed: the pool was used after Close.
var errPeersClosed = errors.New("api: peer connections closed")

// Peer connection tuning. Keepalive pings notice a peer that vanished
// without closing its connections (a crashed host, a cut network) in
// seconds, so forwarding fails fast instead of waiting on TCP; the servers
// permit them (see NewGRPCServer).
const (
	peerKeepaliveTime    = 10 * time.Second
	peerKeepaliveTimeout = 5 * time.Second
	// peerMaxRecvBytes fits a forwarded batch's answer: at most 4 MiB of
	// stored results (boundResults) beside 1000 results' other fields, and
	// with room to spare for a node of an older version, which sent up to
	// 1000 results of 64 KiB each.
	peerMaxRecvBytes = 96 << 20
)

// NewPeers returns an empty pool of plaintext connections.
func NewPeers() *Peers { return NewPeersTLS(nil) }

// NewPeersTLS returns an empty pool whose connections use conf (nil:
// plaintext), for nodes whose client ports serve TLS.
func NewPeersTLS(conf *tls.Config) *Peers {
	creds := insecure.NewCredentials()
	if conf != nil {
		creds = credentials.NewTLS(conf)
	}
	return &Peers{creds: creds, conns: make(map[string]*grpc.ClientConn)}
}

// SetToken sets the bearer token this node presents on the calls it makes
// itself (placement moves, shard status, the control epoch) to nodes that
// check tokens; forwarded calls carry their caller's instead.
func (p *Peers) SetToken(token string) { p.token = token }

// asNode is ctx for a call this node makes on its own behalf.
func (p *Peers) asNode(ctx context.Context) context.Context {
	if p.token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, MetadataAuthorization, "Bearer "+p.token)
}

// client returns the Grid client of the node at addr, connecting lazily.
func (p *Peers) client(addr string) (gridpb.GridClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPeersClosed
	}
	if c, ok := p.conns[addr]; ok {
		return gridpb.NewGridClient(c), nil
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(p.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(peerMaxRecvBytes), grpc.ForceCodecV2(gridpb.Codec{})),
		// Reconnect within seconds after a peer restarts (gRPC's default
		// backoff grows to 2 minutes, far past a failover).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: peerKeepaliveTime, Timeout: peerKeepaliveTimeout, PermitWithoutStream: true}),
	}
	// Every call through the pool is a node's: the peer counts it apart
	// from its clients' calls (gridpb.MetadataCaller).
	opts = append(opts, gridpb.WithCaller(gridpb.CallerNode)...)
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("api: peer %s: %w", addr, err)
	}
	p.conns[addr] = c
	return gridpb.NewGridClient(c), nil
}

// Close closes every connection; calls in flight fail, later ones fail
// with an error naming the closed pool. Close is idempotent.
func (p *Peers) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for addr, c := range p.conns {
		errs = append(errs, c.Close())
		delete(p.conns, addr)
	}
	return errors.Join(errs...)
}

// ShardAdmin runs req on the node at addr with the ShardAdmin RPC, fenced
// by req.Fence. A node that answers with a Redirect does not lead the
// shard: topology.ErrNotShardLeader; one that knows a later control term
// refuses the request: topology.ErrStaleFence.
func (p *Peers) ShardAdmin(ctx context.Context, addr string, req topology.AdminRequest) (uint64, error) {
	c, err := p.client(addr)
	if err != nil {
		return 0, err
	}
	resp, err := c.ShardAdmin(p.asNode(ctx), &gridpb.ShardAdminRequest{
		Shard:       uint32(req.Shard),
		Action:      adminActionPB(req.Action),
		NodeId:      []byte(req.Node),
		RaftAddr:    []byte(req.RaftAddr),
		ControlTerm: req.Fence.ControlTerm,
		Epoch:       req.Fence.Epoch,
	})
	if err != nil {
		if redirectOf(err) != nil {
			return 0, fmt.Errorf("%w: %s of shard %d at %s: %v", topology.ErrNotShardLeader, req.Action, req.Shard, addr, err)
		}
		if sentinel := fromStatus(err); sentinel != nil {
			return 0, fmt.Errorf("%w: %s of shard %d at %s under control term %d: %v", sentinel, req.Action, req.Shard, addr, req.Fence.ControlTerm, err)
		}
		return 0, fmt.Errorf("api: %s of shard %d at %s: %w", req.Action, req.Shard, addr, err)
	}
	return resp.GetCommitIndex(), nil
}

// ShardStatus asks the node at addr for its Status and returns what it
// says of its replica of shard; ok is false when it holds none.
func (p *Peers) ShardStatus(ctx context.Context, addr string, shard int) (topology.ReplicaStatus, bool, error) {
	c, err := p.client(addr)
	if err != nil {
		return topology.ReplicaStatus{}, false, err
	}
	resp, err := c.Status(p.asNode(ctx), &gridpb.StatusRequest{})
	if err != nil {
		return topology.ReplicaStatus{}, false, fmt.Errorf("api: status of %s: %w", addr, err)
	}
	for _, s := range resp.GetShards() {
		if int(s.GetId()) == shard {
			st := replicaStatus(s)
			// A node too old to report its clock (no bound) says nothing
			// against it.
			st.ClockOK = resp.GetClockOk() || resp.GetMaxClockOffsetMs() == 0
			st.DiskFull = resp.GetDiskFull()
			return st, true, nil
		}
	}
	return topology.ReplicaStatus{}, false, nil
}

// replicaStatus is the cluster's form of a node's ShardStatus.
func replicaStatus(s *gridpb.ShardStatus) topology.ReplicaStatus {
	st := topology.ReplicaStatus{
		RaftState:       s.GetRaftState(),
		Leader:          topology.NodeID(s.GetLeader()),
		Applied:         s.GetAppliedIndex(),
		Commit:          s.GetCommitIndex(),
		Last:            s.GetLastIndex(),
		Term:            s.GetTerm(),
		ConfigIndex:     s.GetConfigIndex(),
		ConfigCommitted: s.GetConfigCommitted(),
		LastContact:     -1,
	}
	if ms := s.GetLastContactMs(); ms >= 0 {
		st.LastContact = time.Duration(ms) * time.Millisecond
	}
	for _, m := range s.GetGroup() {
		st.Group = append(st.Group, topology.GroupMember{ID: topology.NodeID(m.GetId()), Voter: m.GetVoter()})
	}
	slices.SortFunc(st.Group, func(a, b topology.GroupMember) int { return cmp.Compare(a.ID, b.ID) })
	return st
}

// adminActionPB converts a cluster action to the protocol's.
func adminActionPB(a topology.AdminAction) gridpb.ShardAdminAction {
	switch a {
	case topology.AdminAddNonvoter:
		return gridpb.ShardAdminAction_ADD_NONVOTER
	case topology.AdminAddVoter:
		return gridpb.ShardAdminAction_ADD_VOTER
	case topology.AdminRemoveServer:
		return gridpb.ShardAdminAction_REMOVE_SERVER
	case topology.AdminTransferLeadership:
		return gridpb.ShardAdminAction_TRANSFER_LEADERSHIP
	}
	return gridpb.ShardAdminAction_SHARD_ADMIN_UNSPECIFIED
}
