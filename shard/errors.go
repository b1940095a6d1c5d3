package shard

import "errors"

// Sentinel errors of a shard. The API maps them to gRPC codes in one place.
var (
	// ErrNotLeader: this replica cannot serve the request now (no leader, a
	// follower, or a new leader that has not applied its term's first entry).
	// Nothing was applied; the request is safe to retry.
	ErrNotLeader = errors.New("shard: not the leader")
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
	// ErrHardSettings: the data directory was created with other hard settings.
	ErrHardSettings = errors.New("shard: hard settings differ from the data directory")
)
