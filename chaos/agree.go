package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	gridnode "github.com/l4xg/grid/node"
)

// agreeBound bounds the wait for each shard's replicas to stand at one log
// index: the leader ticks once a second, and followers apply within
// milliseconds, so most reads of the nodes find them there.
const agreeBound = 30 * time.Second

// replicasAgree compares the replicas of every shard: read at the same log
// index, their state checksums (GET /debug/checksums, shard.Replica.Checksum)
// must be equal. A replica whose log took a different entry than the others
// at some index, which no other check sees until leadership comes to it,
// fails it at once. Each shard is compared in the first read of all the
// nodes that finds its replicas at one index.
func replicasAgree(ctx context.Context, nodes []*node) result {
	r := result{Name: "replicas-agree", Safety: true}
	hc := &http.Client{Timeout: 5 * time.Second}
	agreed := map[uint64]gridnode.ReplicaChecksum{}
	var pending []uint64
	reads := 0
	deadline := time.Now().Add(agreeBound)
	for {
		reads++
		byShard, err := readChecksums(ctx, hc, nodes)
		pending = pending[:0]
		if err == nil {
			for shard, lines := range byShard {
				if _, done := agreed[shard]; done || len(lines) < 2 {
					continue
				}
				if !sameIndex(lines) {
					pending = append(pending, shard)
					continue
				}
				if !sameState(lines) {
					r.Detail = fmt.Sprintf("shard %d: replicas at index %d disagree: %s", shard, lines[0].Index, describe(lines))
					r.Figures = map[string]any{"shard": shard, "index": lines[0].Index, "replicas": describe(lines)}
					return r
				}
				agreed[shard] = lines[0].ReplicaChecksum
			}
		}
		if err == nil && len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				r.Detail = fmt.Sprintf("could not read the replicas' checksums within %v: %v", agreeBound, err)
			} else {
				sort.Slice(pending, func(a, b int) bool { return pending[a] < pending[b] })
				r.Detail = fmt.Sprintf("inconclusive: the replicas of shards %v never stood at one index within %v", pending, agreeBound)
			}
			return r
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	records := 0
	for _, c := range agreed {
		records += c.Records
	}
	r.Pass = true
	r.Detail = fmt.Sprintf("the replicas of each of %d shards hold the same state at the same index (%d hot records)", len(agreed), records)
	r.Figures = map[string]any{"shards": len(agreed), "records": records, "reads": reads}
	return r
}

// nodeChecksum is one replica's checksum and the node it is on.
type nodeChecksum struct {
	on string
	gridnode.ReplicaChecksum
}

// readChecksums reads every node's checksums at once and groups them by
// shard.
func readChecksums(ctx context.Context, hc *http.Client, nodes []*node) (map[uint64][]nodeChecksum, error) {
	reps := make([]gridnode.ChecksumReport, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { reps[i], errs[i] = getChecksums(ctx, hc, n.http) })
	}
	wg.Wait()
	byShard := map[uint64][]nodeChecksum{}
	for i, rep := range reps {
		if errs[i] != nil {
			return nil, fmt.Errorf("%s: %w", nodes[i].id, errs[i])
		}
		for _, c := range rep.Replicas {
			byShard[c.Shard] = append(byShard[c.Shard], nodeChecksum{on: rep.Node, ReplicaChecksum: c})
		}
	}
	return byShard, nil
}

func getChecksums(ctx context.Context, hc *http.Client, addr string) (gridnode.ChecksumReport, error) {
	var rep gridnode.ChecksumReport
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/checksums", nil)
	if err != nil {
		return rep, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("GET /debug/checksums: %s", resp.Status)
	}
	return rep, json.NewDecoder(resp.Body).Decode(&rep)
}

func sameIndex(lines []nodeChecksum) bool {
	for _, l := range lines[1:] {
		if l.Index != lines[0].Index || l.Index == 0 {
			return false
		}
	}
	return true
}

// sameState compares everything but the shard and the index, which
// sameIndex compared.
func sameState(lines []nodeChecksum) bool {
	for _, l := range lines[1:] {
		if l.ReplicaChecksum != lines[0].ReplicaChecksum {
			return false
		}
	}
	return true
}

func describe(lines []nodeChecksum) string {
	parts := make([]string, len(lines))
	for i, l := range lines {
		parts[i] = fmt.Sprintf("%s sum %s (%d records, %d entities, %d cold keys)", l.on, l.Sum, l.Records, l.Entities, l.ColdKeys)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
