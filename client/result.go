package client

import (
	"fmt"
	"time"

	"github.com/l4xg/grid/api/gridpb"
)

// Outcome is what the grid answered to one operation (docs/design.md section 2).
// Outcomes are answers, not failures: they come back in Result.Outcome and
// never as a gRPC error.
type Outcome uint8

// The outcomes, in the order of the wire enum.
const (
	OutcomeUnspecified Outcome = iota // a server that sent no outcome
	OutcomeOK                         // the operation took effect (settles, Get, Forget)
	OutcomeAcquired                   // Reserve took the processing lease
	OutcomeBusy                       // another holder has the lease, or a retry delay runs
	OutcomeDuplicate                  // the key was completed; Result holds the stored result
	OutcomePoisoned                   // the key is poisoned: route the message to a dead-letter queue
	OutcomeStale                      // the entity version is not newer than the committed one
	OutcomeMismatch                   // the key was reserved with a different payload fingerprint
	OutcomeLeaseLost                  // the token was superseded: the lease is gone
)

var outcomeNames = [...]string{
	OutcomeUnspecified: "UNSPECIFIED",
	OutcomeOK:          "OK",
	OutcomeAcquired:    "ACQUIRED",
	OutcomeBusy:        "BUSY",
	OutcomeDuplicate:   "DUPLICATE",
	OutcomePoisoned:    "POISONED",
	OutcomeStale:       "STALE",
	OutcomeMismatch:    "MISMATCH",
	OutcomeLeaseLost:   "LEASE_LOST",
}

// String returns the upper-case wire name of the outcome ("ACQUIRED").
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// State is the state of a key's record after an operation.
type State uint8

// The record states.
const (
	StateUnspecified State = iota // a server that sent no state
	StateAbsent                   // no record
	StateProcessing               // a holder has the lease until Deadline
	StateCompleted                // settled; answers DUPLICATE until Deadline
	StateFailed                   // failed; may be reserved again from Deadline on
	StatePoisoned                 // failed for good; answers POISONED until Deadline
)

var stateNames = [...]string{
	StateUnspecified: "UNSPECIFIED",
	StateAbsent:      "ABSENT",
	StateProcessing:  "PROCESSING",
	StateCompleted:   "COMPLETED",
	StateFailed:      "FAILED",
	StatePoisoned:    "POISONED",
}

// String returns the upper-case name of the state ("PROCESSING").
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Result is the answer of the grid to one operation: gridpb.OpResult in Go
// types. Zero times mean "not set".
type Result struct {
	Outcome Outcome
	// State is the record's state after the operation.
	State State
	// Token is the fencing token of the lease (ACQUIRED, and the record's
	// token where the server reports it).
	Token uint64
	// Attempt is the attempt number of the lease (1 for the first).
	Attempt int
	// Deadline is the lease expiry (PROCESSING), the retry-not-before time
	// (FAILED) or the retention end (COMPLETED, POISONED), by the grid's clock.
	Deadline time.Time
	// RetryAfter is, for BUSY, how long until the holder's lease or the retry
	// delay ends.
	RetryAfter time.Duration
	// CompletedAt is when the key was completed (DUPLICATE, COMPLETED).
	CompletedAt time.Time
	// Result is the stored result of a completed key. The slice is owned by
	// the caller.
	Result []byte
	// ResultOmitted reports that the grid left Result out of a Batch
	// response, which carries at most 4 MiB of stored results (see Batch).
	// The record still has it: Get returns it.
	ResultOmitted bool
	// Fingerprint is the record's payload fingerprint when HasFingerprint.
	Fingerprint    uint64
	HasFingerprint bool
	// Now is the grid's stamped time the operation was evaluated at.
	Now time.Time
	// Existed reports, for Forget, whether a record was removed.
	Existed bool
	// Tier is the tier that held the record: TierHot or TierCold (settled
	// records older than the grid's hot window), TierNone when ABSENT.
	Tier Tier
	// Replayed reports, for ACQUIRED, that the Reserve carried the request
	// id of the lease it found: this is that earlier grant answered again
	// (same token and deadline), most likely to a resend of this call whose
	// first answer was lost, not a new lease.
	Replayed bool
	// TookOverExpired reports, for ACQUIRED and for POISONED by a Reserve,
	// that the Reserve took the key over from a lease that expired
	// unsettled: its holder crashed, hung or overran it (not a failed
	// attempt whose retry delay had passed). The message may be the one
	// that crashed its holder: WithIsolation runs it alone. A Replayed
	// grant does not repeat it.
	TookOverExpired bool

	// SafeUntil is the local safe deadline, by the client's clock, of the
	// lease an ACQUIRED Reserve or an OK Extend holds: the clock just before
	// the call's first send, plus the lease remaining as the answer states
	// it (Deadline - Now), minus the lease margin. Zero for other answers.
	SafeUntil time.Time
	// Sends is how many sends of the call reached a node that may have
	// applied them, this answer's included: sends refused with a Redirect,
	// or that never left the client, prove nothing was applied and do not
	// count. On an error the Result is zero but for Sends.
	Sends int
	// Resent reports that the answer came from a resend: an earlier send
	// of the same call may have been applied (Sends > 1). A resent Reserve
	// may have been granted by that earlier send (see Replayed, and
	// BusyError.AfterRetry); a resent settle answers as a repeated one.
	Resent bool
}

// Tier is where the grid held a record.
type Tier uint8

const (
	TierNone Tier = iota
	TierHot
	TierCold
)

func (t Tier) String() string {
	switch t {
	case TierHot:
		return "hot"
	case TierCold:
		return "cold"
	}
	return ""
}

// Err turns an outcome into an error: nil for OK, ACQUIRED and DUPLICATE (a
// duplicate is a success of the idempotent receiver: the message was
// processed), a *BusyError for BUSY, and ErrPoisoned, ErrStale, ErrMismatch or
// ErrLeaseLost for the others.
func (r Result) Err() error {
	switch r.Outcome {
	case OutcomeOK, OutcomeAcquired, OutcomeDuplicate:
		return nil
	case OutcomeBusy:
		return &BusyError{RetryAfter: r.RetryAfter, Attempt: r.Attempt, AfterRetry: r.Resent}
	case OutcomePoisoned:
		return ErrPoisoned
	case OutcomeStale:
		return ErrStale
	case OutcomeMismatch:
		return ErrMismatch
	case OutcomeLeaseLost:
		return ErrLeaseLost
	default:
		return fmt.Errorf("%w: outcome %v", errProtocol, r.Outcome)
	}
}

// fromPB converts a wire result. It copies nothing but the Result slice
// reference: the message is not used after conversion.
func fromPB(p *gridpb.OpResult) Result {
	r := Result{
		Outcome:     Outcome(p.GetOutcome()),
		State:       State(p.GetState()),
		Token:       p.GetToken(),
		Attempt:     int(p.GetAttempt()),
		Deadline:    fromUnixMs(p.GetDeadlineUnixMs()),
		RetryAfter:  time.Duration(p.GetRetryAfterMs()) * time.Millisecond,
		CompletedAt: fromUnixMs(p.GetCompletedAtUnixMs()),
		Result:      p.GetResult(),
		Now:         fromUnixMs(p.GetNowUnixMs()),
		Existed:     p.GetExisted(),
		Replayed:    p.GetReplayed(),

		TookOverExpired: p.GetLeaseExpired(),

		ResultOmitted: p.GetResultOmitted(),
	}
	switch p.GetTier() {
	case gridpb.Tier_HOT:
		r.Tier = TierHot
	case gridpb.Tier_COLD:
		r.Tier = TierCold
	}
	if p != nil && p.Fingerprint != nil {
		r.Fingerprint, r.HasFingerprint = *p.Fingerprint, true
	}
	if r.Outcome > OutcomeLeaseLost {
		r.Outcome = OutcomeUnspecified
	}
	if r.State > StatePoisoned {
		r.State = StateUnspecified
	}
	return r
}

// Status describes a grid node and its shards (the Status RPC).
type Status struct {
	NodeID  string
	Version string
	// Slots is the fixed number of slots of the digest space, ShardCount
	// the number of shards they are cut into (0 from an older node).
	Slots      int
	ShardCount int
	Now        time.Time
	// Shards are the shards this node holds a replica of.
	Shards []ShardStatus
	// MapEpoch is the epoch of the cluster map the node holds and
	// ControlState its Raft state in the control group; cluster mode only.
	MapEpoch     uint64
	ControlState string
	// NodeState is the node's state in the map as it knows it (active,
	// draining, removed; "" when not in it) and Ready its readiness as
	// /readyz reports it; cluster mode only.
	NodeState string
	Ready     bool
	// ClockOffset is the node's clock offset to its peers (the median of
	// their clocks minus its own; 0 with none measured), MaxClockOffset
	// the bound it enforces (0 from an older node), and ClockOK whether
	// it is inside it: a node outside grants no lease.
	ClockOffset    time.Duration
	MaxClockOffset time.Duration
	ClockOK        bool
	// DiskFull reports that the node's data directory has less room than
	// its disk reserve: it refuses new keys (ResourceExhausted), and in a
	// cluster its shard leaders hand their leadership to nodes with room.
	DiskFull bool
}

// GroupMember is one server of a shard group's Raft configuration.
type GroupMember struct {
	ID    string
	Voter bool // false: a non-voter
}

// ShardStatus describes the local replica of one shard.
type ShardStatus struct {
	ID uint32
	// RaftState is Leader, Follower, Candidate or Shutdown.
	RaftState    string
	Leader       string
	Keys         uint64
	HotBytes     uint64
	AppliedIndex uint64
	CommitIndex  uint64
	LastIndex    uint64
	Term         uint64
	// Stamp is the last time stamped into the shard's log.
	Stamp time.Time
	// ColdKeys and ColdBytes describe the shard's cold tier.
	ColdKeys  uint64
	ColdBytes uint64
	// Suffrage is the replica's role in its group as it knows it:
	// "voter", "nonvoter" or "none" (not a member); "" from an older node.
	// Group is that configuration (sorted by id), ConfigIndex its log
	// index and ConfigCommitted whether that index is committed; on the
	// shard's leader a committed Group is the group's truth.
	Suffrage        string
	Group           []GroupMember
	ConfigIndex     uint64
	ConfigCommitted bool
	// LastContact is how long ago the replica last heard from its leader:
	// 0 on the leader, negative when never.
	LastContact time.Duration
}

func statusFromPB(p *gridpb.StatusResponse) Status {
	s := Status{
		NodeID:       p.GetNodeId(),
		Version:      p.GetVersion(),
		Slots:        int(p.GetSlots()),
		ShardCount:   int(p.GetShardCount()),
		Now:          fromUnixMs(p.GetNowUnixMs()),
		Shards:       make([]ShardStatus, 0, len(p.GetShards())),
		MapEpoch:     p.GetMapEpoch(),
		ControlState: p.GetControlState(),
		NodeState:    p.GetNodeState(),
		Ready:        p.GetReady(),

		ClockOffset:    time.Duration(p.GetClockOffsetMs()) * time.Millisecond,
		MaxClockOffset: time.Duration(p.GetMaxClockOffsetMs()) * time.Millisecond,
		ClockOK:        p.GetClockOk(),
		DiskFull:       p.GetDiskFull(),
	}
	for _, sh := range p.GetShards() {
		s.Shards = append(s.Shards, shardStatusFromPB(sh))
	}
	return s
}

func shardStatusFromPB(sh *gridpb.ShardStatus) ShardStatus {
	out := ShardStatus{
		ID:              sh.GetId(),
		RaftState:       sh.GetRaftState(),
		Leader:          sh.GetLeader(),
		Keys:            sh.GetKeys(),
		HotBytes:        sh.GetHotBytes(),
		AppliedIndex:    sh.GetAppliedIndex(),
		CommitIndex:     sh.GetCommitIndex(),
		LastIndex:       sh.GetLastIndex(),
		Term:            sh.GetTerm(),
		Stamp:           fromUnixMs(sh.GetStampUnixMs()),
		ColdKeys:        sh.GetColdKeys(),
		ColdBytes:       sh.GetColdBytes(),
		Suffrage:        sh.GetSuffrage(),
		ConfigIndex:     sh.GetConfigIndex(),
		ConfigCommitted: sh.GetConfigCommitted(),
		LastContact:     time.Duration(sh.GetLastContactMs()) * time.Millisecond,
	}
	for _, m := range sh.GetGroup() {
		out.Group = append(out.Group, GroupMember{ID: m.GetId(), Voter: m.GetVoter()})
	}
	return out
}

// ClusterMap is the cluster map as one node holds it (the ClusterMap RPC):
// the nodes, and which of them hold and lead every shard.
type ClusterMap struct {
	// Standalone reports a node started without clustering: it holds every
	// shard and serves every operation. A node older than clustering is
	// reported as standalone with nothing else set.
	Standalone bool
	// Epoch is bumped by every change of the map.
	Epoch uint64
	// Slots is the fixed number of slots of the digest space, ShardCount the
	// fixed number of shards they are cut into, Replicas the replication
	// factor.
	Slots      int
	ShardCount int
	Replicas   int
	// NodeID is the node that answered; ControlLeader the control group's
	// leader as it knows it ("" when unknown).
	NodeID        string
	ControlLeader string
	Nodes         []ClusterNode
	// Shards lists the shards in the map, by id.
	Shards []ClusterShard
}

// ClusterNode is one node of the cluster map.
type ClusterNode struct {
	ID       string
	GRPCAddr string
	RaftAddr string
	HTTPAddr string
	// State is active, draining or removed.
	State string
	// Alive reports whether the answering node sees it alive (gossip).
	Alive bool
}

// ClusterShard is one shard of the cluster map.
type ClusterShard struct {
	ID uint32
	// Replicas are the ids of the nodes holding a replica, the preferred
	// leader first.
	Replicas []string
	// Leader is the leader as the answering node knows it when it holds a
	// replica, else the preferred leader.
	Leader string
}

func clusterMapFromPB(p *gridpb.ClusterMapResponse) ClusterMap {
	m := ClusterMap{
		Standalone:    p.GetStandalone(),
		Epoch:         p.GetEpoch(),
		Slots:         int(p.GetSlots()),
		ShardCount:    int(p.GetShardCount()),
		Replicas:      int(p.GetReplicas()),
		NodeID:        p.GetNodeId(),
		ControlLeader: p.GetControlLeader(),
	}
	for _, n := range p.GetNodes() {
		m.Nodes = append(m.Nodes, ClusterNode{
			ID: n.GetId(), GRPCAddr: n.GetGrpcAddr(), RaftAddr: n.GetRaftAddr(), HTTPAddr: n.GetHttpAddr(),
			State: n.GetState(), Alive: n.GetAlive(),
		})
	}
	for _, s := range p.GetShards() {
		m.Shards = append(m.Shards, ClusterShard{ID: s.GetId(), Replicas: append([]string(nil), s.GetReplicas()...), Leader: s.GetLeader()})
	}
	return m
}

func fromUnixMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// millis converts a duration to wire milliseconds, rounding a positive
// sub-millisecond remainder up so that a positive duration never becomes 0
// (which the wire reads as "server default").
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	return ms
}
