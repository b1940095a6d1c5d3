package node

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// ChecksumReport is what GET /debug/checksums answers: the state checksum
// of each replica the node hosts (shard.Replica.Checksum). Replicas of a
// shard that report the same index must report the same sum; the chaos
// tool compares them across the nodes after a run.
type ChecksumReport struct {
	Node     string            `json:"node"`
	Replicas []ReplicaChecksum `json:"replicas"`
}

// ReplicaChecksum is one replica's line of a ChecksumReport.
type ReplicaChecksum struct {
	Shard uint64 `json:"shard"`
	// Index is the log index the checksum was taken after (0: none
	// applied since the replica restored a snapshot).
	Index uint64 `json:"index"`
	// Sum is keyspace.Checksum.Sum in hexadecimal.
	Sum      string `json:"sum"`
	Records  int    `json:"records"`
	Entities int    `json:"entities"`
	// ColdKeys is the cold tier's key count, which Sum leaves out.
	ColdKeys int64 `json:"cold_keys"`
}

// serveChecksums answers GET /debug/checksums. It reads every hot record of
// every local replica, holding each one's apply loop meanwhile: an
// operator's or a test's check, not something to poll.
func (n *Node) serveChecksums(w http.ResponseWriter, _ *http.Request) {
	rep := ChecksumReport{Node: n.host.NodeID(), Replicas: []ReplicaChecksum{}}
	for _, r := range n.host.Replicas() {
		c := r.Checksum()
		rep.Replicas = append(rep.Replicas, ReplicaChecksum{Shard: r.ID(), Index: c.Index, Sum: fmt.Sprintf("%016x", c.Sum),
			Records: c.Records, Entities: c.Entities, ColdKeys: c.ColdKeys})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}
