package shard

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// TestReplicasDoNotPipeline pins that a host's replicas replicate without
// pipelined AppendEntries: hashicorp/raft 1.7.2 can hang in Shutdown on a
// stuck pipeline (raft#612), and the transport refusing pipelines keeps
// Raft off that path.
func TestReplicasDoNotPipeline(t *testing.T) {
	nh := openEmptyHosts(t, 2)
	r, err := nh.hosts[0].StartReplica(0, true)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.cfg.Transport.AppendEntriesPipeline(nh.peers[1].ID, nh.peers[1].Address)
	if p != nil {
		_ = p.Close()
	}
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("a replica's transport opened a pipeline (%v): pipelining must stay off", err)
	}
}
