package topology

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/l4xg/grid/digest"
)

// NodeID names a node for its whole life: 1..64 bytes of [A-Za-z0-9._-].
type NodeID string

// Validate checks the id's length and alphabet. The error quotes the id
// with digest.Quote: it may come from a caller.
func (id NodeID) Validate() error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("node id %s: length %d out of range 1..64", digest.Quote(id), len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("node id %s: byte %s at %d not in [A-Za-z0-9._-]", digest.Quote(id), digest.Quote(id[i:i+1]), i)
		}
	}
	return nil
}

// ValidateAddr checks a node address a caller gives (a Raft address in a
// ShardAdmin request): host:port, a host name or IP address of
// [A-Za-z0-9._:%-] (an IPv6 address in brackets) and a port 1..65535, at
// most the length the map stores.
func ValidateAddr(addr string) error {
	const rule = "want host:port, the host of [A-Za-z0-9._:%-], the port 1..65535"
	if len(addr) == 0 || len(addr) > maxString {
		return fmt.Errorf("address %s: length %d out of range 1..%d", digest.Quote(addr), len(addr), maxString)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("address %s: %s", digest.Quote(addr), rule)
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:%-", c) >= 0) {
			return fmt.Errorf("address %s: %s", digest.Quote(addr), rule)
		}
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("address %s: %s", digest.Quote(addr), rule)
	}
	return nil
}

// NodeState is a node's standing in the cluster map. Only the control group
// changes it.
type NodeState uint8

const (
	// NodeActive nodes hold and receive replicas.
	NodeActive NodeState = iota + 1
	// NodeDraining nodes keep serving their replicas until the planner has
	// moved every one of them away; they receive none.
	NodeDraining
	// NodeRemoved nodes hold nothing; the entry stays as a tombstone.
	NodeRemoved
)

var nodeStateNames = [...]string{"", "active", "draining", "removed"}

func (s NodeState) String() string {
	if s >= NodeActive && s <= NodeRemoved {
		return nodeStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText gives JSON and logs the state's name.
func (s NodeState) MarshalText() ([]byte, error) {
	if s < NodeActive || s > NodeRemoved {
		return nil, fmt.Errorf("%w: node state %d", ErrInvalidMap, uint8(s))
	}
	return []byte(nodeStateNames[s]), nil
}

// UnmarshalText reads a state's name.
func (s *NodeState) UnmarshalText(b []byte) error {
	for i := NodeActive; i <= NodeRemoved; i++ {
		if string(b) == nodeStateNames[i] {
			*s = i
			return nil
		}
	}
	return fmt.Errorf("%w: node state %q", ErrInvalidMap, b)
}

// NodeInfo is what the map records about a node: its addresses, its state
// and the incarnation of its data directory.
//
// Incarnation is the random id a node's data directory took at its first
// start (see NodeMeta): a node that comes back under the same id with a
// wiped directory has a new one. 0 means unknown (a map written before
// incarnations).
type NodeInfo struct {
	ID          NodeID    `json:"id"`
	GRPCAddr    string    `json:"grpc_addr"`
	RaftAddr    string    `json:"raft_addr"`
	HTTPAddr    string    `json:"http_addr,omitempty"`
	State       NodeState `json:"state"`
	Incarnation uint64    `json:"incarnation,omitempty"`
}

// Limits of a map, checked by Validate and by the decoder.
const (
	MaxSlots    = 1 << 20
	MaxShards   = 1 << 16
	MaxReplicas = 7
	MaxNodes    = 1 << 12
)

// Map is the cluster map held by the control group: the nodes, the replica
// set of every shard and an epoch bumped by every change.
//
// ShardReplicas[s] lists the nodes holding a replica of shard s; element 0
// is the shard's preferred leader and the rest are sorted by id. A set may
// briefly hold Replicas+1 nodes while a move adds before it removes.
// Leaders, when not nil, holds one leader hint per shard ("" = unknown).
//
// Generation[s] counts the changes of shard s's replica set (a replica
// added or removed) since the shard was created; nil means all 0. The set
// of a shard at generation 0 is the one its group was created with, by the
// bootstrap map: each of those replicas bootstraps the group with exactly
// that set (Raft accepts the same configuration from every voter). At any
// later generation the group exists somewhere, and a replica without state
// starts empty and waits for the group's leader to add it: a shard group
// is bootstrapped only at cluster creation. Maps decoded from version 1
// (written before generations) have every shard at generation 1.
//
// A Map is a value: methods never retain or share its slices, and Clone
// gives a deep copy. It is not safe for concurrent mutation.
type Map struct {
	Epoch         uint64              `json:"epoch"`
	Slots         uint32              `json:"slots"`
	Shards        int                 `json:"shards"`
	Replicas      int                 `json:"replicas"`
	Nodes         map[NodeID]NodeInfo `json:"nodes"`
	ShardReplicas [][]NodeID          `json:"shard_replicas"`
	Leaders       []NodeID            `json:"leaders,omitempty"`
	Generation    []uint64            `json:"generation,omitempty"`
}

// Created reports whether shard s's replica set is still the one its group
// was created with (generation 0).
func (m *Map) Created(s int) bool {
	return m.Generation == nil || m.Generation[s] == 0
}

// bumpGeneration records a change of shard s's replica set.
func (m *Map) bumpGeneration(s int) {
	if m.Generation == nil {
		m.Generation = make([]uint64, m.Shards)
	}
	m.Generation[s]++
}

// ShardOf is the shard that owns digest d under the map's slot and shard
// counts (digest.Digest.Shard).
func (m *Map) ShardOf(d digest.Digest) int { return d.Shard(m.Slots, m.Shards) }

// Clone returns a deep copy of m.
func (m *Map) Clone() *Map {
	c := *m
	c.Nodes = maps.Clone(m.Nodes)
	if c.Nodes == nil {
		c.Nodes = map[NodeID]NodeInfo{}
	}
	c.ShardReplicas = make([][]NodeID, len(m.ShardReplicas))
	for i, rs := range m.ShardReplicas {
		if len(rs) > 0 {
			c.ShardReplicas[i] = slices.Clone(rs)
		}
	}
	c.Leaders = slices.Clone(m.Leaders)
	c.Generation = slices.Clone(m.Generation)
	return &c
}

// Validate checks every invariant of a map; errors wrap ErrInvalidMap.
func (m *Map) Validate() error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidMap, err)
	}
	return nil
}

func (m *Map) validate() error {
	switch {
	case m.Slots == 0 || m.Slots > MaxSlots:
		return fmt.Errorf("slots %d out of range 1..%d", m.Slots, MaxSlots)
	case m.Shards < 1 || m.Shards > MaxShards || uint32(m.Shards) > m.Slots:
		return fmt.Errorf("shards %d out of range 1..min(%d, slots)", m.Shards, MaxShards)
	case m.Replicas < 1 || m.Replicas > MaxReplicas:
		return fmt.Errorf("replicas %d out of range 1..%d", m.Replicas, MaxReplicas)
	case len(m.Nodes) > MaxNodes:
		return fmt.Errorf("%d nodes, more than %d", len(m.Nodes), MaxNodes)
	case len(m.ShardReplicas) != m.Shards:
		return fmt.Errorf("%d replica sets for %d shards", len(m.ShardReplicas), m.Shards)
	case m.Leaders != nil && len(m.Leaders) != m.Shards:
		return fmt.Errorf("%d leader hints for %d shards", len(m.Leaders), m.Shards)
	case m.Generation != nil && len(m.Generation) != m.Shards:
		return fmt.Errorf("%d generations for %d shards", len(m.Generation), m.Shards)
	}
	for id, n := range m.Nodes {
		if err := validateNode(id, n); err != nil {
			return err
		}
	}
	for s, rs := range m.ShardReplicas {
		if err := m.validateSet(s, rs); err != nil {
			return err
		}
		if m.Leaders != nil && m.Leaders[s] != "" && !slices.Contains(rs, m.Leaders[s]) {
			return fmt.Errorf("shard %d: leader hint %q holds no replica", s, m.Leaders[s])
		}
	}
	return nil
}

func validateNode(id NodeID, n NodeInfo) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if n.ID != id {
		return fmt.Errorf("node %q filed under %q", n.ID, id)
	}
	if n.State < NodeActive || n.State > NodeRemoved {
		return fmt.Errorf("node %q: unknown state %d", id, n.State)
	}
	for _, a := range [...]string{n.GRPCAddr, n.RaftAddr, n.HTTPAddr} {
		if len(a) > maxString {
			return fmt.Errorf("node %q: address longer than %d bytes", id, maxString)
		}
	}
	if n.State != NodeRemoved && (n.GRPCAddr == "" || n.RaftAddr == "") {
		return fmt.Errorf("node %q: gRPC and Raft addresses are required", id)
	}
	return nil
}

func (m *Map) validateSet(s int, rs []NodeID) error {
	if len(rs) > m.Replicas+1 {
		return fmt.Errorf("shard %d: %d replicas, more than %d+1", s, len(rs), m.Replicas)
	}
	for i, id := range rs {
		n, ok := m.Nodes[id]
		if !ok {
			return fmt.Errorf("shard %d: replica on unknown node %q", s, id)
		}
		if n.State == NodeRemoved {
			return fmt.Errorf("shard %d: replica on removed node %q", s, id)
		}
		if i >= 2 && rs[i-1] >= id {
			return fmt.Errorf("shard %d: replicas after the preferred leader not sorted and distinct", s)
		}
		if i >= 1 && rs[0] == id {
			return fmt.Errorf("shard %d: node %q listed twice", s, id)
		}
	}
	return nil
}

// sortedNodeIDs returns the map's node ids in ascending order.
func (m *Map) sortedNodeIDs() []NodeID {
	return slices.Sorted(maps.Keys(m.Nodes))
}

// mapVersion 2 adds each node's incarnation (after its state) and the
// shards' generations (after the leader hints: flag 0 for nil, or 1 and a
// uvarint per shard). Version 1 still decodes: incarnations 0, every shard
// at generation 1.
const mapVersion = 2

// MarshalBinary encodes a valid map canonically: equal maps give equal
// bytes.
func (m *Map) MarshalBinary() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m.appendTo(nil), nil
}

// appendTo appends the encoding of the (valid) map to buf.
func (m *Map) appendTo(buf []byte) []byte {
	buf = append(buf, mapVersion)
	buf = binary.AppendUvarint(buf, m.Epoch)
	buf = binary.AppendUvarint(buf, uint64(m.Slots))
	buf = binary.AppendUvarint(buf, uint64(m.Shards))
	buf = binary.AppendUvarint(buf, uint64(m.Replicas))
	ids := m.sortedNodeIDs()
	index := make(map[NodeID]uint64, len(ids))
	buf = binary.AppendUvarint(buf, uint64(len(ids)))
	for i, id := range ids {
		index[id] = uint64(i)
		buf = appendNodeInfo(buf, m.Nodes[id])
	}
	for _, rs := range m.ShardReplicas {
		buf = binary.AppendUvarint(buf, uint64(len(rs)))
		for _, id := range rs {
			buf = binary.AppendUvarint(buf, index[id])
		}
	}
	if m.Leaders == nil {
		buf = append(buf, 0)
	} else {
		buf = append(buf, 1)
		for _, id := range m.Leaders {
			v := uint64(0)
			if id != "" {
				v = index[id] + 1
			}
			buf = binary.AppendUvarint(buf, v)
		}
	}
	if m.Generation == nil {
		return append(buf, 0)
	}
	buf = append(buf, 1)
	for _, g := range m.Generation {
		buf = binary.AppendUvarint(buf, g)
	}
	return buf
}

// appendNodeInfo appends n in the current encoding: ID, GRPCAddr,
// RaftAddr, HTTPAddr, the state byte, then the incarnation (uvarint).
func appendNodeInfo(buf []byte, n NodeInfo) []byte {
	buf = appendString(buf, string(n.ID))
	buf = appendString(buf, n.GRPCAddr)
	buf = appendString(buf, n.RaftAddr)
	buf = appendString(buf, n.HTTPAddr)
	buf = append(buf, byte(n.State))
	return binary.AppendUvarint(buf, n.Incarnation)
}

// readNodeInfo reads a NodeInfo; without incarnation (version 1
// encodings) it has none.
func readNodeInfo(r *reader, incarnation bool) NodeInfo {
	n := NodeInfo{ID: NodeID(r.string()), GRPCAddr: r.string(), RaftAddr: r.string(), HTTPAddr: r.string(), State: NodeState(r.byte())}
	if incarnation {
		n.Incarnation = r.uvarint(^uint64(0))
	}
	return n
}

// UnmarshalBinary decodes a map and validates it; the receiver is
// overwritten only on success. Errors wrap ErrCorrupt or ErrInvalidMap.
func (m *Map) UnmarshalBinary(b []byte) error {
	r := &reader{b: b}
	got, err := readMap(r)
	if err == nil {
		err = r.done()
	}
	if err != nil {
		return err
	}
	*m = *got
	return nil
}

// DecodeMap decodes and validates a map encoded by MarshalBinary.
func DecodeMap(b []byte) (*Map, error) {
	m := new(Map)
	if err := m.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return m, nil
}

func readMap(r *reader) (*Map, error) {
	v := r.byte()
	if r.err == nil && (v < 1 || v > mapVersion) {
		r.fail("map version %d, this binary reads 1..%d", v, mapVersion)
	}
	m := &Map{Epoch: r.uvarint(^uint64(0))}
	m.Slots = uint32(r.uvarint(MaxSlots))
	m.Shards = int(r.uvarint(MaxShards))
	m.Replicas = int(r.uvarint(MaxReplicas))
	n := r.uvarint(min(MaxNodes, uint64(len(r.b))))
	ids := make([]NodeID, n)
	m.Nodes = make(map[NodeID]NodeInfo, n)
	for i := range ids {
		info := readNodeInfo(r, v >= 2)
		if i > 0 && r.err == nil && info.ID <= ids[i-1] {
			r.fail("node ids not sorted")
		}
		ids[i] = info.ID
		m.Nodes[info.ID] = info
	}
	if r.err == nil && uint64(m.Shards) > uint64(len(r.b)) {
		r.fail("truncated replica sets")
	}
	if r.err != nil {
		return nil, r.err
	}
	m.ShardReplicas = make([][]NodeID, m.Shards)
	for s := range m.ShardReplicas {
		k := r.uvarint(MaxReplicas + 1)
		for j := uint64(0); j < k && r.err == nil; j++ {
			if n == 0 {
				r.fail("shard %d: replica but no nodes", s)
				break
			}
			if i := r.uvarint(n - 1); r.err == nil {
				m.ShardReplicas[s] = append(m.ShardReplicas[s], ids[i])
			}
		}
	}
	readLeaders(r, m, ids)
	if v >= 2 {
		readGenerations(r, m)
	} else if r.err == nil {
		// Written before generations: the shards' groups were created by
		// their first replica, so none is at its creation set any more.
		m.Generation = make([]uint64, m.Shards)
		for s := range m.Generation {
			m.Generation[s] = 1
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, m.Validate()
}

func readGenerations(r *reader, m *Map) {
	switch flag := r.byte(); {
	case r.err != nil || flag == 0:
		return
	case flag != 1:
		r.fail("generations flag %d", flag)
		return
	}
	if uint64(m.Shards) > uint64(len(r.b)) {
		r.fail("truncated generations")
		return
	}
	m.Generation = make([]uint64, m.Shards)
	for s := range m.Generation {
		m.Generation[s] = r.uvarint(^uint64(0))
	}
}

func readLeaders(r *reader, m *Map, ids []NodeID) {
	switch flag := r.byte(); {
	case r.err != nil || flag == 0:
		return
	case flag != 1:
		r.fail("leader hints flag %d", flag)
		return
	}
	if uint64(m.Shards) > uint64(len(r.b)) {
		r.fail("truncated leader hints")
		return
	}
	m.Leaders = make([]NodeID, m.Shards)
	for s := range m.Leaders {
		if v := r.uvarint(uint64(len(ids))); v > 0 {
			m.Leaders[s] = ids[v-1]
		}
	}
}
