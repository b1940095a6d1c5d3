package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// Tests of what results say about their sends, and of the request ids a
// Reserve carries, against real nodes. A lost answer is made by a client
// interceptor: the real node received and applied the operation, and the
// client gets Unavailable instead of the answer, as from a connection reset
// after the request went out.

// TestResentReserveIsCountedAndKeepsItsRequestID: a Reserve whose first
// answer is lost is sent again with the same random request id, and its
// Result says it took two sends and came from a resend. The grid answers
// the resend from the lease the first send got: BUSY from a grid that
// ignores request ids (AfterRetry in its error), that same grant again from
// one that keeps them (TestResentReserveGetsItsOwnGrant).
func TestResentReserveIsCountedAndKeepsItsRequestID(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		n := gridtest.Start(t)
		d := &wiretap.AnswerDropper{Kind: "reserve"}
		c := dialNode(t, n, client.WithBatching(batching), fastResend, dropAnswer(d))
		r, err := c.Reserve(testCtx(t), "ns", "k", client.WithLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if r.Sends != 2 || !r.Resent {
			t.Fatalf("result %+v: want 2 sends, resent", r)
		}
		ids, answers := d.Sent()
		if len(ids) != 2 || len(ids[0]) != 1 || len(ids[1]) != 1 {
			t.Fatalf("request ids sent: %x; want one Reserve in each of 2 sends", ids)
		}
		if len(ids[0][0]) != 16 || !bytes.Equal(ids[0][0], ids[1][0]) {
			t.Fatalf("request ids %x and %x: want the same 16 bytes in both sends", ids[0][0], ids[1][0])
		}
		granted := answers[0][0]
		switch {
		case r.Outcome == client.OutcomeBusy:
			var be *client.BusyError
			if err := r.Err(); !errors.As(err, &be) || !be.AfterRetry {
				t.Fatalf("BUSY after a resend: Err() = %v, want AfterRetry", err)
			}
		case r.Outcome != client.OutcomeAcquired || !r.Replayed || r.Token != granted.GetToken():
			t.Fatalf("resend answered %+v; want BUSY, or the first send's grant (token %d) replayed", r, granted.GetToken())
		}
		if !r.Replayed && r.Outcome == client.OutcomeAcquired {
			t.Fatal("a second grant for one Reserve")
		}

		fresh, err := c.Reserve(testCtx(t), "ns", "other")
		if err != nil || fresh.Sends != 1 || fresh.Resent || fresh.Replayed {
			t.Fatalf("reserve sent once: %+v %v; want 1 send, not resent", fresh, err)
		}
		ids, _ = d.Sent()
		if last := ids[len(ids)-1][0]; len(last) != 16 || bytes.Equal(last, ids[0][0]) {
			t.Fatalf("second Reserve's request id %x: want a new one", last)
		}
	})
}

// TestResentReserveGetsItsOwnGrant is the end-to-end promise of the
// request id: a Reserve whose granted answer was lost gets that grant back
// on its resend, ACQUIRED with the same token (Replayed), never BUSY
// against itself, and Process runs its handler once under it.
func TestResentReserveGetsItsOwnGrant(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		n := gridtest.Start(t)
		ctx := testCtx(t)
		d := &wiretap.AnswerDropper{Kind: "reserve"}
		c := dialNode(t, n, client.WithBatching(batching), fastResend, dropAnswer(d))
		before := time.Now()
		r, err := c.Reserve(ctx, "ns", "k", client.WithLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		_, answers := d.Sent()
		granted := answers[0][0]
		if r.Outcome != client.OutcomeAcquired || !r.Replayed || r.Token != granted.GetToken() || r.Attempt != 1 ||
			r.Deadline.UnixMilli() != granted.GetDeadlineUnixMs() || r.Sends != 2 || !r.Resent {
			t.Fatalf("resend answered %+v; want the first grant (token %d) replayed after 2 sends", r, granted.GetToken())
		}
		// What is left of the grant, counted from before the first send.
		if want := before.Add(r.Deadline.Sub(r.Now) - client.DefaultLeaseMargin(time.Minute)); r.SafeUntil.Before(want) ||
			r.SafeUntil.After(before.Add(time.Minute-client.DefaultLeaseMargin(time.Minute))) {
			t.Fatalf("safe until %v; want from %v, within the lease", r.SafeUntil, want)
		}

		d2 := &wiretap.AnswerDropper{Kind: "reserve"}
		pc := dialNode(t, n, client.WithBatching(batching), fastResend, dropAnswer(d2))
		runs := 0
		out, err := pc.Process(ctx, "ns", "p", func(_ context.Context, l client.Lease) ([]byte, error) {
			runs++
			return []byte("once"), nil
		})
		if err != nil || runs != 1 || !out.Replayed || !out.Resent || out.ReserveSends != 2 || out.Attempt != 1 {
			t.Fatalf("process: %+v %v, %d runs; want one run under the replayed grant", out, err, runs)
		}
		g, err := pc.Get(ctx, "ns", "p", client.WithShowToken())
		if err != nil || g.State != client.StateCompleted || g.Token != out.Token {
			t.Fatalf("get: %+v %v", g, err)
		}
	})
}

// TestProcessCountsTheSendsOfItsSettle: the answer to Process's Complete is
// lost after the grid applied it; the resend answers OK (Complete is
// idempotent for its token) and Processed says the settle took two sends.
func TestProcessCountsTheSendsOfItsSettle(t *testing.T) {
	n := gridtest.Start(t)
	d := &wiretap.AnswerDropper{Kind: "complete"}
	c := dialNode(t, n, fastResend, dropAnswer(d))
	out, err := c.Process(testCtx(t), "ns", "k", func(context.Context, client.Lease) ([]byte, error) {
		return []byte("ok"), nil
	})
	if err != nil || out.ReserveSends != 1 || out.SettleSends != 2 || !out.Resent || out.Replayed {
		t.Fatalf("process: %+v %v; want 1 reserve send, 2 settle sends, resent", out, err)
	}
	plain, err := c.Process(testCtx(t), "ns", "k2", func(context.Context, client.Lease) ([]byte, error) {
		return nil, nil
	})
	if err != nil || plain.ReserveSends != 1 || plain.SettleSends != 1 || plain.Resent {
		t.Fatalf("process without a loss: %+v %v", plain, err)
	}
	dup, err := c.Process(testCtx(t), "ns", "k", nil2)
	if err != nil || !dup.Duplicate || dup.ReserveSends != 1 || dup.SettleSends != 0 {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
}

// TestBatchCountsSendsPerOperation: an explicit Batch whose first RPC's
// answer is lost sends every operation again, each Reserve with its own
// request id, the same as in the first send; each Result says two sends.
func TestBatchCountsSendsPerOperation(t *testing.T) {
	n := gridtest.Start(t)
	ctx := testCtx(t)
	d := &wiretap.AnswerDropper{Kind: "reserve"}
	c := dialNode(t, n, fastResend, dropAnswer(d))
	ops := []client.Op{client.ReserveOp("ns", "a"), client.ReserveOp("ns", "b"), client.GetOp("ns", "c")}
	results, errs, err := c.Batch(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if errs[i] != nil || r.Sends != 2 || !r.Resent {
			t.Fatalf("op %d: %+v %v; want 2 sends, resent", i, r, errs[i])
		}
	}
	ids, _ := d.Sent()
	if len(ids) != 2 || len(ids[0]) != 2 || !bytes.Equal(ids[0][0], ids[1][0]) || !bytes.Equal(ids[0][1], ids[1][1]) ||
		bytes.Equal(ids[0][0], ids[0][1]) || len(ids[0][0]) != 16 {
		t.Fatalf("request ids %x; want one per Reserve, kept across the resend", ids)
	}
	// Sent once: one send each, and the grant's safe deadline.
	results, errs, err = c.Batch(ctx, []client.Op{client.ReserveOp("ns", "d"), client.GetOp("ns", "a")})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatal(err, errs)
	}
	for i, r := range results {
		if r.Sends != 1 || r.Resent {
			t.Fatalf("op %d sent once: %+v", i, r)
		}
	}
	if results[0].Outcome != client.OutcomeAcquired || results[0].SafeUntil.IsZero() || !results[1].SafeUntil.IsZero() {
		t.Fatalf("safe deadlines %v, %v: want one for the grant only", results[0].SafeUntil, results[1].SafeUntil)
	}
}

// TestResendAcrossAFailoverIsCounted: the node leading a shard stalls (its
// Raft traffic held back, as a frozen process's would be) while a Reserve
// of that shard is sent to it through a client with the default options.
// The send gets no answer within the send timeout and may have been
// applied; the client resends to the shard's other replicas until the new
// leader grants the key. The Result says so: more than one send, resent.
func TestResendAcrossAFailoverIsCounted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := gridtest.StartCluster(t, gridtest.ClusterOptions{})
	cl, err := client.Dial(context.Background(), strings.Join(c.Addrs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const s = 1
	var victim int
	testwait.For(t, 10*time.Second, "a single leader of shard 1", func() bool {
		l := c.Leaders(s)
		if len(l) == 1 {
			victim = l[0]
		}
		return len(l) == 1
	})
	keys := keysOn(t, c, "stall", s, 2)
	warm, err := cl.Reserve(testCtx(t), "stall", keys[0]) // the client learns the leader
	if err != nil || warm.Outcome != client.OutcomeAcquired || warm.Sends != 1 || warm.Resent {
		t.Fatalf("warm-up reserve: %+v %v", warm, err)
	}
	c.Pause(victim)
	defer c.Resume(victim)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := cl.Reserve(ctx, "stall", keys[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reserve across the failover: %v after %d sends", r.Outcome, r.Sends)
	if r.Sends < 2 || !r.Resent {
		t.Fatalf("reserve across the failover: %+v; want more than one send, resent", r)
	}
	// The stalled leader could not commit the first send: the grant is new.
	if r.Outcome != client.OutcomeAcquired || r.Replayed {
		t.Fatalf("reserve across the failover answered %+v; want a new grant", r)
	}
}
