package api_test

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/shard"
)

// TestAuditAndDigestRefusals: bad audit ranges and namespaces and malformed
// digest reads are InvalidArgument errors that name the problem; a valid
// audit of an empty cold tier ends cleanly with no record.
func TestAuditAndDigestRefusals(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	audit := func(r *gridpb.AuditRequest) (int, error) {
		stream, err := c.Audit(gridtest.Context(t), r)
		if err != nil {
			return 0, err
		}
		got := 0
		for {
			_, err := stream.Recv()
			if err == io.EOF {
				return got, nil
			}
			if err != nil {
				return got, err
			}
			got++
		}
	}
	for _, tc := range []struct {
		req  *gridpb.AuditRequest
		want string
	}{
		{&gridpb.AuditRequest{Namespace: []byte("Not A Namespace")}, "invalid namespace"},
		{&gridpb.AuditRequest{Namespace: []byte("orders"), SinceUnixMs: 2000, UntilUnixMs: 1000}, "invalid audit range"},
		{&gridpb.AuditRequest{Namespace: []byte("orders"), SinceUnixMs: -1}, "invalid audit range"},
	} {
		_, err := audit(tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Audit(%v) = %v; want InvalidArgument naming %q", tc.req, err, tc.want)
		}
	}
	if got, err := audit(&gridpb.AuditRequest{Namespace: []byte("orders")}); err != nil || got != 0 {
		t.Fatalf("audit of an empty cold tier: %d records, %v", got, err)
	}

	for _, req := range []*gridpb.GetRequest{
		{Digest: []byte("short")},
		{Digest: make([]byte, 16), Namespace: []byte("orders")},
		{Digest: make([]byte, 16), Key: []byte("k")},
	} {
		_, err := c.Get(gridtest.Context(t), req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "invalid digest") {
			t.Errorf("Get(%v) = %v; want InvalidArgument naming the digest", req, err)
		}
	}
	res, err := c.Get(gridtest.Context(t), &gridpb.GetRequest{Digest: make([]byte, 16)})
	if err != nil || res.GetState() != gridpb.State_ABSENT || res.GetTier() != gridpb.Tier_TIER_UNSPECIFIED {
		t.Fatalf("Get of an unknown digest: %v, %v", res, err)
	}
}

// TestAuditInAClusterListsLedShards: every replica of a shard holds the
// same cold records, so in a cluster a node lists only the shards its
// replica leads: each record comes from exactly one node, and a node that
// leads nothing lists nothing although its cold tiers are full.
func TestAuditInAClusterListsLedShards(t *testing.T) {
	const perShard = 4
	tc := startCluster(t, gridtest.ClusterOptions{TuneHost: func(c *shard.HostConfig) {
		c.HotWindow, c.TickInterval = time.Millisecond, 20*time.Millisecond // settled records go cold at once
	}})
	ledBy(tc) // every shard serves before the writes
	c := gridtest.Dial(t, tc.nodes[0].addr)
	for s := range testShards {
		for i := range perShard {
			k := keyOf(t, s, "audit", i)
			res, err := c.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: k})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("ns"), Key: k, Token: res.Token}); err != nil {
				t.Fatal(err)
			}
		}
	}
	testwait.For(t, 20*time.Second, "every replica to demote the settled records", func() bool {
		for _, n := range tc.nodes {
			for s := range testShards {
				if tc.host(n).Replica(s).Status().Cold.Keys != perShard {
					return false
				}
			}
		}
		return true
	})
	// Leadership can move under a loaded machine (an election, a
	// hand-over); the audits are judged against the leaders that held
	// before and after all of them, and taken again when it moved.
	for attempt := 1; ; attempt++ {
		before := ledBy(tc)
		lists := map[*member][]*gridpb.AuditRecord{}
		for _, n := range tc.nodes {
			lists[n] = auditOf(t, n, "ns")
		}
		if after := ledBy(tc); !slices.Equal(before, after) {
			if attempt == 5 {
				t.Fatalf("the shards' leaders moved during each of %d audits of the cluster (last %v, then %v)", attempt, before, after)
			}
			t.Logf("leaders moved during the audits (%v, then %v): auditing again", before, after)
			continue
		}
		seen := map[string]string{}
		for _, n := range tc.nodes {
			want := 0
			for _, l := range before {
				if l == n.i {
					want += perShard
				}
			}
			for _, rec := range lists[n] {
				if l := before[rec.Shard]; l != n.i {
					t.Errorf("%s listed a record of shard %d, led by %s", n.id, rec.Shard, tc.nodes[l].id)
				}
				if other, dup := seen[string(rec.Digest)]; dup {
					t.Errorf("record %x listed by %s and %s", rec.Digest, other, n.id)
				}
				seen[string(rec.Digest)] = string(n.id)
			}
			if len(lists[n]) != want {
				t.Errorf("%s listed %d records, want %d (the shards it leads)", n.id, len(lists[n]), want)
			}
		}
		if len(seen) != testShards*perShard {
			t.Errorf("the nodes listed %d records in all, want %d", len(seen), testShards*perShard)
		}
		return
	}
}

// ledBy waits until every shard of tc has a single serving preferred
// leader and returns each shard's leader's index.
func ledBy(tc *testCluster) []int {
	out := make([]int, testShards)
	for s := range testShards {
		out[s] = tc.leader(s).i
	}
	return out
}

// auditOf lists namespace ns through n's Audit to the end of the stream.
func auditOf(t *testing.T, n *member, ns string) []*gridpb.AuditRecord {
	t.Helper()
	stream, err := gridtest.Dial(t, n.addr).Audit(gridtest.Context(t), &gridpb.AuditRequest{Namespace: []byte(ns)})
	if err != nil {
		t.Fatal(err)
	}
	var out []*gridpb.AuditRecord
	for {
		rec, err := stream.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
}
