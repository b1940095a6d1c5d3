package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	gridnode "github.com/l4xg/grid/node"
)

// checksumServer answers /debug/checksums with what report returns for the
// n-th read.
func checksumServer(t *testing.T, id string, report func(read int) []gridnode.ReplicaChecksum) *node {
	var reads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/checksums" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(gridnode.ChecksumReport{Node: id, Replicas: report(int(reads.Add(1)))})
	}))
	t.Cleanup(srv.Close)
	return &node{id: id, http: srv.Listener.Addr().String()}
}

// TestReplicasAgree: replicas at one index with one sum pass; replicas
// that are at different indexes are read again until they stand at one;
// replicas at one index with different sums fail, naming the shard.
func TestReplicasAgree(t *testing.T) {
	line := func(shard, index uint64, sum string) gridnode.ReplicaChecksum {
		return gridnode.ReplicaChecksum{Shard: shard, Index: index, Sum: sum, Records: 3}
	}
	same := func(int) []gridnode.ReplicaChecksum {
		return []gridnode.ReplicaChecksum{line(0, 10, "aa"), line(1, 20, "bb")}
	}
	// n2 lags one tick behind on shard 1 for its first two reads.
	lagging := func(read int) []gridnode.ReplicaChecksum {
		if read <= 2 {
			return []gridnode.ReplicaChecksum{line(0, 10, "aa"), line(1, 19, "b0")}
		}
		return same(read)
	}
	diverged := func(int) []gridnode.ReplicaChecksum {
		return []gridnode.ReplicaChecksum{line(0, 10, "aa"), line(1, 20, "cc")}
	}
	ctx := context.Background()

	r := replicasAgree(ctx, []*node{checksumServer(t, "n1", same), checksumServer(t, "n2", lagging), checksumServer(t, "n3", same)})
	if !r.Pass || r.Figures["reads"].(int) < 3 {
		t.Errorf("agreeing replicas, one lagging at first: %+v", r)
	}
	r = replicasAgree(ctx, []*node{checksumServer(t, "n1", same), checksumServer(t, "n2", diverged), checksumServer(t, "n3", same)})
	if r.Pass || !r.Safety || !strings.Contains(r.Detail, "shard 1") || !strings.Contains(r.Detail, "n2 sum cc") {
		t.Errorf("a diverged replica: %+v", r)
	}
}
