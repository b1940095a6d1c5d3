package topology

import (
	"errors"
	"fmt"
	"time"
)

// AdminAction is a change of one shard group's Raft configuration, run by
// the node that leads the shard.
type AdminAction uint8

const (
	// AdminAddNonvoter adds a replica that receives the log but does not vote.
	AdminAddNonvoter AdminAction = iota + 1
	// AdminAddVoter adds a voting replica, or promotes a non-voter.
	AdminAddVoter
	// AdminRemoveServer removes a replica from the group.
	AdminRemoveServer
	// AdminTransferLeadership hands leadership to Node (empty: to any
	// up-to-date voter).
	AdminTransferLeadership
)

var adminNames = [...]string{"", "add-nonvoter", "add-voter", "remove-server", "transfer-leadership"}

func (a AdminAction) String() string {
	if a >= AdminAddNonvoter && a <= AdminTransferLeadership {
		return adminNames[a]
	}
	return fmt.Sprintf("admin(%d)", uint8(a))
}

// AdminRequest asks a shard's leader to change the shard's group.
type AdminRequest struct {
	Shard    int
	Action   AdminAction
	Node     NodeID
	RaftAddr string // the node's Raft (mux) address: add and transfer actions
	// Fence is what the change was planned under. The receiving node
	// refuses it with ErrStaleFence when it knows a later control term:
	// a deposed control leader cannot change a shard's group.
	Fence Fence
}

// Fence is the control group's term and the map epoch of the control
// leader that plans a change.
type Fence struct {
	ControlTerm uint64
	Epoch       uint64
}

// ErrStaleFence: a shard admin request was planned under a control term
// older than one the receiving node knows; its sender no longer leads the
// control group.
var ErrStaleFence = errors.New("cluster: stale control term")

// ReplicaStatus is what a node says about its replica of one shard.
type ReplicaStatus struct {
	RaftState string // Leader, Follower, Candidate, Shutdown
	Leader    NodeID // "" when unknown
	Applied   uint64
	Commit    uint64
	Last      uint64
	Term      uint64
	// Group is the shard group's configuration as this replica knows it
	// (the latest it has, sorted by id), ConfigIndex the log index of that
	// configuration, and ConfigCommitted whether that index is committed.
	// On the shard's leader a committed Group is the group's truth.
	Group           []GroupMember
	ConfigIndex     uint64
	ConfigCommitted bool
	// LastContact is how long ago the replica last heard from its leader:
	// 0 on the leader, negative when never.
	LastContact time.Duration
	// ClockOK reports that the replica's node is within the maximum
	// clock offset (its Status says so, or it is too old to say): a node
	// outside it grants no lease, so no leadership is moved to it.
	ClockOK bool
	// DiskFull reports that the replica's node has less room than its
	// disk reserve (its Status says so): it refuses new keys, so no
	// leadership is moved to it.
	DiskFull bool
}

// Role is the replica's standing in the Group it reports: "voter",
// "nonvoter" or "none" (not a member).
func (st ReplicaStatus) Role(self NodeID) string {
	for _, m := range st.Group {
		if m.ID == self {
			if m.Voter {
				return "voter"
			}
			return "nonvoter"
		}
	}
	return "none"
}

// ErrNotShardLeader: the node asked to change a shard's group does not
// lead that shard (any more). Find the leader and ask again.
var ErrNotShardLeader = errors.New("cluster: not the shard's leader")

// DrainStatus is a node's standing after a drain request.
type DrainStatus struct {
	Node         NodeID
	State        NodeState
	ReplicasLeft int
	Epoch        uint64
}

// ErrNotControlLeader: the request needs the control group's leader and
// this node is not it. The error's text names the leader when known; the
// API forwards the request there.
var ErrNotControlLeader = errors.New("cluster: not the control group's leader")
