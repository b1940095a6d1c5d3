package raftlog

import (
	"time"

	"github.com/hashicorp/raft"
)

// SetTimeouts sets rc's failure-detection timeouts from one heartbeat
// timeout h, the same way for every group on a node (shards and the control
// group):
//
//   - a follower that hears nothing from its leader for h (hashicorp/raft
//     waits h to 2h, at random) starts a pre-vote, which the other voters
//     refuse while they still hear their leader;
//   - a candidate's election runs for h (again h to 2h);
//   - a leader that has not heard from a quorum of voters for h (its lease)
//     steps down.
//
// The lease is h, the most hashicorp/raft allows, not a fraction of it: it
// only decides when a cut-off leader stops (nothing is read on a lease here:
// reads and the control epoch go through the log or a barrier), and a
// shorter one turns every scheduling stall of more than a few heartbeats
// (heartbeats go out every h/10) into an election. Seen with h/2: on a
// machine with both cores busy, the control group of an in-process
// five-node cluster under the race detector stepped down 23 times in a
// minute, every leader losing its quorum by 250 to 660 ms.
func SetTimeouts(rc *raft.Config, h time.Duration) {
	rc.HeartbeatTimeout = h
	rc.ElectionTimeout = h
	rc.LeaderLeaseTimeout = h
}
