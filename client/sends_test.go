package client

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Tests of what results say about their sends, and of the request ids a
// Reserve carries, against real nodes. A lost answer is made by a client
// interceptor: the real node received and applied the operation, and the
// client gets Unavailable instead of the answer, as from a connection reset
// after the request went out.

// answerDropper drops the answer of the first RPC that carries an
// operation of one kind, and records, for every RPC carrying such an
// operation, the request ids of its Reserves and the answers the node gave.
type answerDropper struct {
	kind string

	mu      sync.Mutex
	dropped bool
	ids     [][][]byte           // per RPC: the request ids of its Reserves
	answers [][]*gridpb.OpResult // per RPC: the node's answers, dropped ones included
}

func (d *answerDropper) option() Option {
	return intercept(func(_ context.Context, _ string, req, reply any, err error) error {
		if !carries(req, d.kind) {
			return err
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		var ids [][]byte
		for _, op := range opsOf(req) {
			if r := op.GetReserve(); r != nil {
				ids = append(ids, bytes.Clone(r.GetRequestId()))
			}
		}
		d.ids = append(d.ids, ids)
		var answers []*gridpb.OpResult
		switch r := reply.(type) {
		case *gridpb.BatchResponse:
			answers = r.GetResults()
		case *gridpb.StreamResponse:
			answers = r.GetResults()
		case *gridpb.OpResult:
			answers = []*gridpb.OpResult{r}
		}
		d.answers = append(d.answers, answers)
		if err == nil && !d.dropped {
			d.dropped = true
			return status.Error(codes.Unavailable, "test: connection reset after the request was applied")
		}
		return err
	})
}

// sent returns the request ids and answers recorded so far.
func (d *answerDropper) sent() ([][][]byte, [][]*gridpb.OpResult) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ids, d.answers
}

// fastResend resends after a few milliseconds, as the default policy does
// after 25 ms.
var fastResend = WithRetryPolicy(RetryPolicy{Attempts: 5, BaseBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond})

// TestResentReserveIsCountedAndKeepsItsRequestID: a Reserve whose first
// answer is lost is sent again with the same random request id, and its
// Result says it took two sends and came from a resend. The grid answers
// the resend from the lease the first send got: BUSY from a grid that
// ignores request ids (AfterRetry in its error), that same grant again from
// one that keeps them (TestResentReserveGetsItsOwnGrant).
func TestResentReserveIsCountedAndKeepsItsRequestID(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		n := gridtest.Start(t)
		d := &answerDropper{kind: "reserve"}
		c := dialNode(t, n, WithBatching(batching), fastResend, d.option())
		r, err := c.Reserve(testCtx(t), "ns", "k", WithLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if r.Sends != 2 || !r.Resent {
			t.Fatalf("result %+v: want 2 sends, resent", r)
		}
		ids, answers := d.sent()
		if len(ids) != 2 || len(ids[0]) != 1 || len(ids[1]) != 1 {
			t.Fatalf("request ids sent: %x; want one Reserve in each of 2 sends", ids)
		}
		if len(ids[0][0]) != 16 || !bytes.Equal(ids[0][0], ids[1][0]) {
			t.Fatalf("request ids %x and %x: want the same 16 bytes in both sends", ids[0][0], ids[1][0])
		}
		granted := answers[0][0]
		switch {
		case r.Outcome == OutcomeBusy:
			var be *BusyError
			if err := r.Err(); !errors.As(err, &be) || !be.AfterRetry {
				t.Fatalf("BUSY after a resend: Err() = %v, want AfterRetry", err)
			}
		case r.Outcome != OutcomeAcquired || !r.Replayed || r.Token != granted.GetToken():
			t.Fatalf("resend answered %+v; want BUSY, or the first send's grant (token %d) replayed", r, granted.GetToken())
		}
		if !r.Replayed && r.Outcome == OutcomeAcquired {
			t.Fatal("a second grant for one Reserve")
		}

		fresh, err := c.Reserve(testCtx(t), "ns", "other")
		if err != nil || fresh.Sends != 1 || fresh.Resent || fresh.Replayed {
			t.Fatalf("reserve sent once: %+v %v; want 1 send, not resent", fresh, err)
		}
		ids, _ = d.sent()
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
		d := &answerDropper{kind: "reserve"}
		c := dialNode(t, n, WithBatching(batching), fastResend, d.option())
		before := c.cfg.clock()
		r, err := c.Reserve(ctx, "ns", "k", WithLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		_, answers := d.sent()
		granted := answers[0][0]
		if r.Outcome != OutcomeAcquired || !r.Replayed || r.Token != granted.GetToken() || r.Attempt != 1 ||
			r.Deadline.UnixMilli() != granted.GetDeadlineUnixMs() || r.Sends != 2 || !r.Resent {
			t.Fatalf("resend answered %+v; want the first grant (token %d) replayed after 2 sends", r, granted.GetToken())
		}
		// What is left of the grant, counted from before the first send.
		if want := before.Add(r.Deadline.Sub(r.Now) - DefaultLeaseMargin(time.Minute)); r.SafeUntil.Before(want) ||
			r.SafeUntil.After(before.Add(time.Minute-DefaultLeaseMargin(time.Minute))) {
			t.Fatalf("safe until %v; want from %v, within the lease", r.SafeUntil, want)
		}

		d2 := &answerDropper{kind: "reserve"}
		pc := dialNode(t, n, WithBatching(batching), fastResend, d2.option())
		runs := 0
		out, err := pc.Process(ctx, "ns", "p", func(_ context.Context, l Lease) ([]byte, error) {
			runs++
			return []byte("once"), nil
		})
		if err != nil || runs != 1 || !out.Replayed || !out.Resent || out.ReserveSends != 2 || out.Attempt != 1 {
			t.Fatalf("process: %+v %v, %d runs; want one run under the replayed grant", out, err, runs)
		}
		g, err := pc.Get(ctx, "ns", "p", WithShowToken())
		if err != nil || g.State != StateCompleted || g.Token != out.Token {
			t.Fatalf("get: %+v %v", g, err)
		}
	})
}

// TestProcessCountsTheSendsOfItsSettle: the answer to Process's Complete is
// lost after the grid applied it; the resend answers OK (Complete is
// idempotent for its token) and Processed says the settle took two sends.
func TestProcessCountsTheSendsOfItsSettle(t *testing.T) {
	n := gridtest.Start(t)
	d := &answerDropper{kind: "complete"}
	c := dialNode(t, n, fastResend, d.option())
	out, err := c.Process(testCtx(t), "ns", "k", func(context.Context, Lease) ([]byte, error) {
		return []byte("ok"), nil
	})
	if err != nil || out.ReserveSends != 1 || out.SettleSends != 2 || !out.Resent || out.Replayed {
		t.Fatalf("process: %+v %v; want 1 reserve send, 2 settle sends, resent", out, err)
	}
	plain, err := c.Process(testCtx(t), "ns", "k2", func(context.Context, Lease) ([]byte, error) {
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

// nil2 is a handler that must not run.
func nil2(context.Context, Lease) ([]byte, error) {
	return nil, errors.New("handler ran for a duplicate")
}

// TestProcessBusyAfterAResendIsAfterRetry: against a grid that ignores
// request ids, a Process whose Reserve was granted but whose answer was
// lost finds its own lease on the resend, reported as AfterRetry.
func TestProcessBusyAfterAResendIsAfterRetry(t *testing.T) {
	c, f := dialFake(t, fastRetry(3))
	f.ignoreRequestIDs()
	var lost bool
	var mu sync.Mutex
	f.setHooks(fakeHooks{after: func(op *gridpb.Op, _ *gridpb.OpResult) error {
		mu.Lock()
		defer mu.Unlock()
		if op.GetReserve() != nil && !lost {
			lost = true
			return status.Error(codes.Unavailable, "connection reset")
		}
		return nil
	}})
	out, err := c.Process(testCtx(t), "ns", "k", nil2)
	var be *BusyError
	if !errors.As(err, &be) || !be.AfterRetry || out.ReserveSends != 2 || !out.Resent {
		t.Fatalf("process: %+v %v; want a *BusyError with AfterRetry after 2 sends", out, err)
	}
	ids := map[string]bool{}
	for _, op := range f.received() {
		if r := op.GetReserve(); r != nil {
			ids[string(r.GetRequestId())] = true
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%d request ids for one Process; want 1", len(ids))
	}
}

// TestBatchCountsSendsPerOperation: an explicit Batch whose first RPC's
// answer is lost sends every operation again, each Reserve with its own
// request id, the same as in the first send; each Result says two sends.
func TestBatchCountsSendsPerOperation(t *testing.T) {
	n := gridtest.Start(t)
	ctx := testCtx(t)
	d := &answerDropper{kind: "reserve"}
	c := dialNode(t, n, fastResend, d.option())
	ops := []Op{ReserveOp("ns", "a"), ReserveOp("ns", "b"), GetOp("ns", "c")}
	results, errs, err := c.Batch(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if errs[i] != nil || r.Sends != 2 || !r.Resent {
			t.Fatalf("op %d: %+v %v; want 2 sends, resent", i, r, errs[i])
		}
	}
	ids, _ := d.sent()
	if len(ids) != 2 || len(ids[0]) != 2 || !bytes.Equal(ids[0][0], ids[1][0]) || !bytes.Equal(ids[0][1], ids[1][1]) ||
		bytes.Equal(ids[0][0], ids[0][1]) || len(ids[0][0]) != 16 {
		t.Fatalf("request ids %x; want one per Reserve, kept across the resend", ids)
	}
	// Sent once: one send each, and the grant's safe deadline.
	results, errs, err = c.Batch(ctx, []Op{ReserveOp("ns", "d"), GetOp("ns", "a")})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatal(err, errs)
	}
	for i, r := range results {
		if r.Sends != 1 || r.Resent {
			t.Fatalf("op %d sent once: %+v", i, r)
		}
	}
	if results[0].Outcome != OutcomeAcquired || results[0].SafeUntil.IsZero() || !results[1].SafeUntil.IsZero() {
		t.Fatalf("safe deadlines %v, %v: want one for the grant only", results[0].SafeUntil, results[1].SafeUntil)
	}
}

// TestBatchUnsentOperationCountsNoSend: an operation that got no answer
// reports the sends that may have been applied, none for one never sent.
func TestBatchUnsentOperationCountsNoSend(t *testing.T) {
	c, err := Dial(context.Background(), gridtest.ClosedAddr(t), fastRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	results, errs, err := c.Batch(testCtx(t), []Op{ReserveOp("ns", "k")})
	if err == nil || !strings.Contains(errs[0].Error(), "not sent") || results[0].Sends != 0 {
		t.Fatalf("batch to a closed port: %+v %v %v", results[0], errs[0], err)
	}
	r, err := c.Reserve(testCtx(t), "ns", "k")
	if err == nil || r.Sends != 0 || r.Resent {
		t.Fatalf("reserve to a closed port: %+v %v", r, err)
	}
}

// TestRedirectedSendIsNotCounted: a send refused with a Redirect proves
// nothing was applied, so the operation redirected to its leader and
// answered there took one send and is not resent.
func TestRedirectedSendIsNotCounted(t *testing.T) {
	fc := newFakeCluster(t, 3, 3)
	c := fc.dial(t, "")
	ctx := testCtx(t)
	key := fc.keyOn(0, 0)
	if _, err := c.Get(ctx, "ns", key); err != nil { // the client learns the map
		t.Fatal(err)
	}
	fc.move(0, 1, false) // the map still names the old leader
	r, err := c.Reserve(ctx, "ns", key)
	if err != nil || r.Outcome != OutcomeAcquired || r.Sends != 1 || r.Resent {
		t.Fatalf("redirected reserve: %+v %v; want 1 send, not resent", r, err)
	}
	if fc.redirects() == 0 {
		t.Fatal("no redirect happened")
	}
	fc.move(0, 2, false)
	results, errs, err := c.Batch(ctx, []Op{ReserveOp("ns", fc.keyOn(0, 1))})
	if err != nil || errs[0] != nil || results[0].Sends != 1 || results[0].Resent {
		t.Fatalf("redirected batch op: %+v %v %v", results[0], errs[0], err)
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
	cl, err := Dial(context.Background(), strings.Join(c.Addrs(), ","))
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
	if err != nil || warm.Outcome != OutcomeAcquired || warm.Sends != 1 || warm.Resent {
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
	if r.Outcome != OutcomeAcquired || r.Replayed {
		t.Fatalf("reserve across the failover answered %+v; want a new grant", r)
	}
}
