package shard

import "errors"

// Sentinel errors of a shard. The API maps them to gRPC codes in one place.
var (
	// ErrNotLeader: this replica cannot serve the request now (no leader, a
	// follower, a new leader that has not applied its term's first entry,
	// or a leader that may not grant leases now: see ErrClockOffset).
	// Nothing was applied; the request is safe to retry.
	ErrNotLeader = errors.New("shard: not the leader")
	// ErrClockOffset: a lease (Reserve, Extend) was refused because of
	// the clock rules (doc.go, Time): this leader's clock is behind the
	// shard's stamps by more than the maximum clock offset, or did not
	// reach them within it, or this node's clock is outside the maximum
	// offset of its peers'. Nothing was applied. The refusal also matches
	// ErrNotLeader, so that it is routed like one: the request goes to
	// the shard's leader again, which this one hands the leadership to
	// when it can.
	ErrClockOffset = errors.New("shard: clock outside the maximum clock offset")
	// ErrOutcomeUnknown: the commands reached the log but their fate is
	// unknown (leadership lost, or the caller stopped waiting). Retrying is
	// safe for settles, which are idempotent; a retried Reserve may see its
	// own lease as BUSY.
	ErrOutcomeUnknown = errors.New("shard: outcome unknown")
	// ErrClosed: the shard is shutting down.
	ErrClosed = errors.New("shard: closed")
	// ErrNoSuchShard: a shard id outside 0..Shards-1.
	ErrNoSuchShard = errors.New("shard: no such shard")
	// ErrNotVoter: leadership can only go to a voter of the group.
	ErrNotVoter = errors.New("shard: not a voter of the group")
	// ErrDiskFull: the data directory's file system has less room than the
	// disk reserve (HostConfig.DiskReserve): a Reserve, which makes a new
	// record, was refused before anything was proposed. Settles, reads and
	// Raft's own writes go on; new keys are taken again once space is
	// freed.
	ErrDiskFull = errors.New("shard: disk space below the reserve")
	// ErrHardSettings: the data directory was created with other hard settings.
	ErrHardSettings = errors.New("shard: hard settings differ from the data directory")
)
