package client

import (
	"context"
	"fmt"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
)

// Location is where a key lives in the grid: its record digest, slot and
// shard, and the nodes of that shard, by the cluster map the client holds.
type Location struct {
	// Standalone reports a node that holds every shard itself; Leader is
	// then that node, as the client reached it.
	Standalone bool
	// Digest is the record digest, 32 hex digits (as audit and get
	// --digest print and take it).
	Digest string
	Slot   uint32
	Shard  int
	// Leader is the shard's leader as the client knows it (a Redirect it
	// followed, else the map); its ID and Addr are "" when unknown.
	Leader LocatedNode
	// Replicas are the nodes holding a replica of the shard, the preferred
	// leader first.
	Replicas []LocatedNode
	// Epoch is the epoch of the map the answer was computed from.
	Epoch uint64
}

// LocatedNode is one node of a Location.
type LocatedNode struct {
	ID   string
	Addr string // gRPC address
}

// LocateOption configures a Locate.
type LocateOption interface {
	applyLocate(*locateConfig)
}

type locateConfig struct{ entity string }

func (o EntityOption) applyLocate(c *locateConfig) { c.entity = string(o) }

var _ LocateOption = EntityOption("")

// Locate says which shard serves the key ns/key (of an entity, with
// ForEntity: a key reserved WithEntity lives on its entity's shard) and
// which nodes hold and lead that shard. It is computed by the client from
// its cluster map, the function the grid routes by, and sends no
// operation. A map is fetched when the client has none yet, or when it
// knows no reachable leader for the shard; a client built WithoutRouting
// asks its node for the map each time.
func (c *Client) Locate(ctx context.Context, ns, key string, opts ...LocateOption) (Location, error) {
	var lc locateConfig
	for _, o := range opts {
		o.applyLocate(&lc)
	}
	if ns == "" || key == "" {
		return Location{}, fmt.Errorf("%w: locate needs a namespace and a key", ErrInvalidArgument)
	}
	d := digest.Record(ns, []byte(key), EntityOption(lc.entity).bytes())
	if c.r.fixed {
		m, err := c.ClusterMap(ctx)
		if err != nil {
			return Location{}, err
		}
		return locateIn(c.r.seeds[0], mapPB(m), d, "")
	}
	for refreshed := false; ; refreshed = true {
		from, m, leader, settled := c.r.locate(d)
		if settled || refreshed {
			if m == nil {
				return Location{}, fmt.Errorf("%w: no node gave the cluster map", ErrUnavailable)
			}
			return locateIn(from, m, d, leader)
		}
		select {
		case <-c.r.refresh():
		case <-ctx.Done():
			return Location{}, ctxDone(ctx)
		case <-c.root.Done():
			return Location{}, ErrClosed
		}
	}
}

// locate is what the router holds for digest d: the map (nil when none,
// a standalone answer then naming from), the shard's leader it knows, and
// whether that answer is good (a map, and a leader that is not avoided).
func (r *router) locate(d digest.Digest) (from string, m *gridpb.ClusterMapResponse, leader string, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	switch r.mode {
	case modeSingle:
		if r.last != nil {
			return r.single, r.last, "", true
		}
		return r.single, &gridpb.ClusterMapResponse{Standalone: true}, "", true
	case modeCluster:
		sh := r.shards[d.Shard(r.slots, len(r.shards))]
		return "", r.last, sh.leader, sh.leader != "" && !r.isDown(sh.leader)
	}
	return "", nil, "", false
}

// locateIn computes the Location of d in map m. leaderAddr, when set, is
// the leader the client learned, which wins over the map's. from is the
// node a standalone answer came from.
func locateIn(from string, m *gridpb.ClusterMapResponse, d digest.Digest, leaderAddr string) (Location, error) {
	loc := Location{Digest: d.String(), Epoch: m.GetEpoch()}
	slots, n := m.GetSlots(), int(m.GetShardCount())
	valid := slots > 0 && n > 0 && n <= int(slots)
	if valid {
		loc.Slot, loc.Shard = d.Slot(slots), d.Shard(slots, n)
	}
	if m.GetStandalone() {
		// A standalone node says its slot and shard counts too (a node
		// older than clustering does not: slot and shard stay 0).
		loc.Standalone = true
		loc.Leader = LocatedNode{Addr: from}
		loc.Replicas = []LocatedNode{loc.Leader}
		return loc, nil
	}
	if !valid {
		return Location{}, fmt.Errorf("%w: cluster map of %d shards over %d slots", errProtocol, n, slots)
	}
	addrs, ids := map[string]string{}, map[string]string{}
	for _, nd := range m.GetNodes() {
		addrs[nd.GetId()], ids[nd.GetGrpcAddr()] = nd.GetGrpcAddr(), nd.GetId()
	}
	for _, sh := range m.GetShards() {
		if int(sh.GetId()) != loc.Shard {
			continue
		}
		for _, id := range sh.GetReplicas() {
			loc.Replicas = append(loc.Replicas, LocatedNode{ID: id, Addr: addrs[id]})
		}
		if id := sh.GetLeader(); id != "" {
			loc.Leader = LocatedNode{ID: id, Addr: addrs[id]}
		}
	}
	if leaderAddr != "" {
		loc.Leader = LocatedNode{ID: ids[leaderAddr], Addr: leaderAddr}
	}
	return loc, nil
}

// mapPB is the wire form of a ClusterMap, for locateIn.
func mapPB(m ClusterMap) *gridpb.ClusterMapResponse {
	p := &gridpb.ClusterMapResponse{Standalone: m.Standalone, Epoch: m.Epoch, Slots: uint32(m.Slots), ShardCount: uint32(m.ShardCount)}
	for _, n := range m.Nodes {
		p.Nodes = append(p.Nodes, &gridpb.ClusterNode{Id: n.ID, GrpcAddr: n.GRPCAddr, State: n.State})
	}
	for _, s := range m.Shards {
		p.Shards = append(p.Shards, &gridpb.ClusterShard{Id: s.ID, Replicas: s.Replicas, Leader: s.Leader})
	}
	return p
}
