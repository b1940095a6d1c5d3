package api_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testclock"
)

// The lease rules at the edges of docs/design.md sections 2 and 3, through a
// real node: a resent Reserve gets its own grant back, a Get shows no token
// to a reader, and an Extend never shortens a lease.

// newFixedClock is a node clock that moves only when told, so that stamps
// and deadlines are exact.
func newFixedClock() *testclock.Clock {
	return testclock.At(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
}

func reserveReq(key, requestID string, leaseMs int64) *gridpb.ReserveRequest {
	r := &gridpb.ReserveRequest{Namespace: []byte("lease"), Key: []byte(key), LeaseMs: leaseMs}
	if requestID != "" {
		r.RequestId = []byte(requestID)
	}
	return r
}

// TestReserveResentGetsItsGrant: a Reserve resent with its request id, as a
// client does when the answer to its first send was lost, answers the grant
// it was given (ACQUIRED, same token, deadline and attempt, replayed), not
// BUSY against its own lease; as a unary RPC and inside a Batch. Another
// request id, or none, is another consumer and is BUSY. Before request ids,
// the resend answered BUSY and the caller never saw its token.
func TestReserveResentGetsItsGrant(t *testing.T) {
	clock := newFixedClock()
	n := gridtest.Start(t, gridtest.Options{Clock: clock.Now})
	c := gridtest.Dial(t, n.Addr())

	first, err := c.Reserve(gridtest.Context(t), reserveReq("k", "call-1", 30_000))
	if err != nil || first.Outcome != gridpb.Outcome_ACQUIRED || first.Replayed {
		t.Fatalf("first send: %v %v", first, err)
	}
	clock.Add(2 * time.Second)
	again, err := c.Reserve(gridtest.Context(t), reserveReq("k", "call-1", 30_000))
	if err != nil {
		t.Fatal(err)
	}
	if again.Outcome != gridpb.Outcome_ACQUIRED || !again.Replayed || again.Token != first.Token ||
		again.DeadlineUnixMs != first.DeadlineUnixMs || again.Attempt != first.Attempt || again.State != gridpb.State_PROCESSING {
		t.Fatalf("resend with the same request id: %v\nwant ACQUIRED replayed with token %d, deadline %d, attempt %d",
			again, first.Token, first.DeadlineUnixMs, first.Attempt)
	}
	for name, req := range map[string]*gridpb.ReserveRequest{
		"another request id": reserveReq("k", "call-2", 30_000),
		"no request id":      reserveReq("k", "", 30_000),
	} {
		other, err := c.Reserve(gridtest.Context(t), req)
		if err != nil || other.Outcome != gridpb.Outcome_BUSY || other.Token != 0 || other.Replayed {
			t.Errorf("%s: %v %v, want BUSY without a token", name, other, err)
		}
	}
	// The grant is the caller's: its token settles the key.
	done, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("lease"), Key: []byte("k"), Token: again.Token})
	if err != nil || done.Outcome != gridpb.Outcome_OK {
		t.Fatalf("complete with the replayed token: %v %v", done, err)
	}

	// In one Batch (the client's automatic batching may put two sends of
	// one call in one request only after a resend, but the rule is the
	// same), and across Batches.
	op := &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: reserveReq("b", "call-b", 30_000)}}
	resp, err := c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{op, op}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Results
	if r[0].Outcome != gridpb.Outcome_ACQUIRED || r[0].Replayed || r[1].Outcome != gridpb.Outcome_ACQUIRED || !r[1].Replayed || r[1].Token != r[0].Token {
		t.Fatalf("one reserve sent twice in a batch: %v", r)
	}
	resp, err = c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{op}})
	if err != nil || !resp.Results[0].Replayed || resp.Results[0].Token != r[0].Token {
		t.Fatalf("resent in another batch: %v %v", resp, err)
	}

	// Past its deadline the lease is not replayed: the resend takes it
	// over like any reserve, with a new token and the lost attempt counted.
	clock.Add(31 * time.Second)
	late, err := c.Reserve(gridtest.Context(t), reserveReq("b", "call-b", 30_000))
	if err != nil || late.Outcome != gridpb.Outcome_ACQUIRED || late.Replayed || late.Token <= r[0].Token || late.Attempt != 2 {
		t.Fatalf("resend after the lease expired: %v %v, want a takeover (attempt 2, new token)", late, err)
	}
}

// TestReserveRequestIDLimit: a request id over 64 bytes is refused with
// InvalidArgument naming the limit; 64 bytes are fine.
func TestReserveRequestIDLimit(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	_, err := c.Reserve(gridtest.Context(t), reserveReq("k", strings.Repeat("x", 65), 30_000))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "request id") || !strings.Contains(err.Error(), "limit 64") {
		t.Fatalf("65-byte request id: %v, want InvalidArgument naming the 64-byte limit", err)
	}
	resp, err := c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{{Op: &gridpb.Op_Reserve{Reserve: reserveReq("k", strings.Repeat("x", 65), 30_000)}}}})
	if err != nil || resp.Results[0].Error == nil || codes.Code(resp.Results[0].Error.Code) != codes.InvalidArgument {
		t.Fatalf("65-byte request id in a batch: %v %v", resp, err)
	}
	res, err := c.Reserve(gridtest.Context(t), reserveReq("k", strings.Repeat("x", 64), 30_000))
	if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("64-byte request id: %v %v", res, err)
	}
}

// TestGetShowsNoToken: whoever can read a key must not get the holder's
// token, with which it could settle another consumer's lease: a Get shows
// none, linearizable or stale, unary or in a Batch, whatever the state,
// unless it asks for the operator view with show_token. Before, every Get
// returned the holder's token.
func TestGetShowsNoToken(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	held, err := c.Reserve(gridtest.Context(t), reserveReq("held", "", 60_000))
	if err != nil || held.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatal(held, err)
	}
	settled, err := c.Reserve(gridtest.Context(t), reserveReq("settled", "", 60_000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("lease"), Key: []byte("settled"), Token: settled.Token}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		key   string
		state gridpb.State
		token uint64
	}{{"held", gridpb.State_PROCESSING, held.Token}, {"settled", gridpb.State_COMPLETED, settled.Token}} {
		for _, stale := range []bool{false, true} {
			for _, show := range []bool{false, true} {
				req := &gridpb.GetRequest{Namespace: []byte("lease"), Key: []byte(k.key), StaleOk: stale, ShowToken: show}
				want := uint64(0)
				if show {
					want = k.token
				}
				got, err := c.Get(gridtest.Context(t), req)
				if err != nil || got.State != k.state || got.Token != want {
					t.Errorf("Get %s stale_ok=%v show_token=%v: %v %v, want %v with token %d", k.key, stale, show, got, err, k.state, want)
				}
				resp, err := c.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{{Op: &gridpb.Op_Get{Get: req}}}})
				if err != nil || resp.Results[0].State != k.state || resp.Results[0].Token != want {
					t.Errorf("Batch Get %s stale_ok=%v show_token=%v: %v %v, want %v with token %d", k.key, stale, show, resp, err, k.state, want)
				}
			}
		}
	}
	// A reserve finding the settled record still gets its token (DUPLICATE).
	dup, err := c.Reserve(gridtest.Context(t), reserveReq("settled", "", 60_000))
	if err != nil || dup.Outcome != gridpb.Outcome_DUPLICATE || dup.Token != settled.Token {
		t.Errorf("duplicate: %v %v, want DUPLICATE with token %d", dup, err, settled.Token)
	}
}

// TestExtendNeverShortens: an Extend with a lease shorter than what is left
// keeps the deadline (and says so), so a holder that timed its work by its
// deadline does not lose the key to another consumer early; a longer one
// lengthens it. Before, a shorter Extend cut the lease and let another
// consumer take the key while the holder still worked.
func TestExtendNeverShortens(t *testing.T) {
	clock := newFixedClock()
	n := gridtest.Start(t, gridtest.Options{Clock: clock.Now})
	c := gridtest.Dial(t, n.Addr())
	held, err := c.Reserve(gridtest.Context(t), reserveReq("k", "", 10_000))
	if err != nil || held.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatal(held, err)
	}
	extend := func(leaseMs int64) *gridpb.OpResult {
		t.Helper()
		r, err := c.Extend(gridtest.Context(t), &gridpb.ExtendRequest{Namespace: []byte("lease"), Key: []byte("k"), Token: held.Token, LeaseMs: leaseMs})
		if err != nil || r.Outcome != gridpb.Outcome_OK {
			t.Fatalf("extend %d ms: %v %v", leaseMs, r, err)
		}
		return r
	}
	clock.Add(time.Second)
	if r := extend(1000); r.DeadlineUnixMs != held.DeadlineUnixMs {
		t.Fatalf("extend by 1 s with 9 s left: deadline %d, want the lease's %d kept", r.DeadlineUnixMs, held.DeadlineUnixMs)
	}
	clock.Add(4 * time.Second)
	other, err := c.Reserve(gridtest.Context(t), reserveReq("k", "", 10_000))
	if err != nil || other.Outcome != gridpb.Outcome_BUSY || other.DeadlineUnixMs != held.DeadlineUnixMs {
		t.Fatalf("another consumer 5 s into a 10 s lease: %v %v, want BUSY until %d", other, err, held.DeadlineUnixMs)
	}
	r := extend(20_000)
	if want := r.NowUnixMs + 20_000; r.DeadlineUnixMs != want || want <= held.DeadlineUnixMs {
		t.Fatalf("extend by 20 s: deadline %d, want %d", r.DeadlineUnixMs, want)
	}
}

// TestReserveResentThroughAnotherNode: on a real 3-node cluster, a Reserve
// whose first send went through a follower (forwarded to the shard's
// leader) and whose resend goes to the leader itself, then through the
// other follower in a Batch, as a client failing over does, answers the
// one grant every time. A Get forwarded by a follower shows no token
// unless it asks for the operator view.
func TestReserveResentThroughAnotherNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	tc := startCluster(t, gridtest.ClusterOptions{})
	l := tc.leader(0)
	var followers []*member
	for _, n := range tc.nodes {
		if n != l {
			followers = append(followers, n)
		}
	}
	k := keyOf(t, 0, "resent", 0)
	req := &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: k, LeaseMs: 60_000, RequestId: []byte("call-1")}
	first, err := gridtest.Dial(t, followers[0].addr).Reserve(gridtest.Context(t), req)
	if err != nil || first.Outcome != gridpb.Outcome_ACQUIRED || first.Replayed {
		t.Fatalf("first send, through %s: %v %v", followers[0].id, first, err)
	}
	again, err := gridtest.Dial(t, l.addr).Reserve(gridtest.Context(t), req)
	if err != nil || again.Outcome != gridpb.Outcome_ACQUIRED || !again.Replayed || again.Token != first.Token || again.DeadlineUnixMs != first.DeadlineUnixMs {
		t.Fatalf("resend to the leader %s: %v %v, want the grant with token %d replayed", l.id, again, err, first.Token)
	}
	resp, err := gridtest.Dial(t, followers[1].addr).Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{{Op: &gridpb.Op_Reserve{Reserve: req}}}})
	if err != nil || !resp.Results[0].Replayed || resp.Results[0].Token != first.Token {
		t.Fatalf("resend in a batch through %s: %v %v", followers[1].id, resp, err)
	}
	fc := gridtest.Dial(t, followers[0].addr)
	for _, show := range []bool{false, true} {
		got, err := fc.Get(gridtest.Context(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: k, ShowToken: show})
		want := uint64(0)
		if show {
			want = first.Token
		}
		if err != nil || got.State != gridpb.State_PROCESSING || got.Token != want {
			t.Errorf("Get forwarded by %s, show_token=%v: %v %v, want token %d", followers[0].id, show, got, err, want)
		}
	}
}
