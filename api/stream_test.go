package api_test

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
)

func reserveOf(ns, key string) *gridpb.Op {
	return &gridpb.Op{Op: &gridpb.Op_Reserve{Reserve: &gridpb.ReserveRequest{Namespace: []byte(ns), Key: []byte(key), LeaseMs: 5000}}}
}

// recvAnswers reads response frames until every id of want is answered
// once, and returns the answers by id.
func recvAnswers(t *testing.T, st gridpb.Grid_StreamClient, want []uint64) map[uint64]*gridpb.OpResult {
	t.Helper()
	got := map[uint64]*gridpb.OpResult{}
	for len(got) < len(want) {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("recv after %d of %d answers: %v", len(got), len(want), err)
		}
		if len(resp.Ids) != len(resp.Results) {
			t.Fatalf("a frame of %d ids and %d results", len(resp.Ids), len(resp.Results))
		}
		for i, id := range resp.Ids {
			if _, dup := got[id]; dup {
				t.Fatalf("id %d answered twice", id)
			}
			got[id] = resp.Results[i]
		}
	}
	for _, id := range want {
		if got[id] == nil {
			t.Fatalf("id %d not answered; answers %v", id, got)
		}
	}
	return got
}

// Every operation of a frame is answered once under its id, the
// operations of one shard in frame order, an invalid one with its own
// error; the stream stays usable, and ends cleanly when the client closes
// its side.
func TestStreamAnswersEveryOperation(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	ctx := gridtest.Context(t)
	st, err := c.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	var ops []*gridpb.Op
	for i := range 40 {
		ids, ops = append(ids, uint64(1000+i)), append(ops, reserveOf("orders", fmt.Sprint("k-", i)))
	}
	// The same key again, after its first reserve in the frame: BUSY.
	ids, ops = append(ids, 7), append(ops, reserveOf("orders", "k-3"))
	ids, ops = append(ids, 8), append(ops, reserveOf("orders", ""))
	if err := st.Send(&gridpb.StreamRequest{Ids: ids, Ops: ops}); err != nil {
		t.Fatal(err)
	}
	got := recvAnswers(t, st, ids)
	for i := range 40 {
		if r := got[uint64(1000+i)]; r.Outcome != gridpb.Outcome_ACQUIRED || r.Token == 0 {
			t.Fatalf("reserve k-%d: %v", i, r)
		}
	}
	if r := got[7]; r.Outcome != gridpb.Outcome_BUSY {
		t.Fatalf("second reserve of k-3 in the frame: %v, want BUSY", r)
	}
	if e := got[8].GetError(); e == nil || codes.Code(e.Code) != codes.InvalidArgument || !strings.Contains(e.Message, "empty key") {
		t.Fatalf("reserve of an empty key: %v", got[8])
	}

	// A second frame on the same stream sees the first one's records.
	if err := st.Send(&gridpb.StreamRequest{Ids: []uint64{9}, Ops: []*gridpb.Op{reserveOf("orders", "k-0")}}); err != nil {
		t.Fatal(err)
	}
	if r := recvAnswers(t, st, []uint64{9})[9]; r.Outcome != gridpb.Outcome_BUSY {
		t.Fatalf("reserve of k-0 in a later frame: %v, want BUSY", r)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want the stream's clean end", err)
	}
}

// A frame over the batch limit gets the limit's error for every
// operation, and the stream keeps serving; a frame whose ids do not match
// its operations ends the stream with InvalidArgument.
func TestStreamLimits(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	ctx := gridtest.Context(t)
	st, err := c.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &gridpb.StreamRequest{}
	for i := range 1001 {
		req.Ids, req.Ops = append(req.Ids, uint64(i+1)), append(req.Ops, reserveOf("ns", fmt.Sprint("big-", i)))
	}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	for id, r := range recvAnswers(t, st, req.Ids) {
		if e := r.GetError(); e == nil || codes.Code(e.Code) != codes.ResourceExhausted || !strings.Contains(e.Message, "batch too large: 1001 operations, limit 1000") {
			t.Fatalf("op %d of 1001: %v", id, r)
		}
	}
	if err := st.Send(&gridpb.StreamRequest{Ids: []uint64{5000}, Ops: []*gridpb.Op{reserveOf("ns", "big-0")}}); err != nil {
		t.Fatal(err)
	}
	if r := recvAnswers(t, st, []uint64{5000})[5000]; r.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("after the refused frame: %v, want ACQUIRED (nothing of it was applied)", r)
	}

	if err := st.Send(&gridpb.StreamRequest{Ids: []uint64{1, 2}, Ops: []*gridpb.Op{reserveOf("ns", "x")}}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "2 ids for 1 operations") {
		t.Fatalf("a frame of 2 ids and 1 operation: %v", err)
	}
}

// A node that shuts down answers the frames its streams read, then ends
// them with Unavailable, so that its graceful stop does not wait on a
// client's long-lived stream (it would until its drain deadline, then cut
// every stream with the transport).
func TestStreamEndsAtShutdown(t *testing.T) {
	n := gridtest.Start(t)
	c := gridtest.Dial(t, n.Addr())
	st, err := c.Stream(gridtest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&gridpb.StreamRequest{Ids: []uint64{1}, Ops: []*gridpb.Op{reserveOf("orders", "before-stop")}}); err != nil {
		t.Fatal(err)
	}
	if r := recvAnswers(t, st, []uint64{1})[1]; r.Outcome != gridpb.Outcome_ACQUIRED {
		t.Fatalf("reserve before the stop: %v", r)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n.Close()
	}()
	_, err = st.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "node shutting down") {
		t.Fatalf("the stream at shutdown ended with %v, want Unavailable: node shutting down", err)
	}
	<-stopped
}

// A frame's operations are validated and digested once each: the node's
// planned counter grows by the frame's size, whatever shards it spans.
func TestStreamPlansEachOperationOnce(t *testing.T) {
	n := gridtest.Start(t, gridtest.Options{HTTP: true})
	c := gridtest.Dial(t, n.Addr())
	ctx := gridtest.Context(t)
	planned := func() float64 { return plannedOps(t, n.HTTPAddr()) }
	st, err := c.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := planned()
	const size = 24 // over several shards
	var ids []uint64
	var ops []*gridpb.Op
	for i := range size {
		ids, ops = append(ids, uint64(i+1)), append(ops, reserveOf("orders", fmt.Sprint("p-", i)))
	}
	if err := st.Send(&gridpb.StreamRequest{Ids: ids, Ops: ops}); err != nil {
		t.Fatal(err)
	}
	for id, r := range recvAnswers(t, st, ids) {
		if r.Outcome != gridpb.Outcome_ACQUIRED {
			t.Fatalf("id %d: %v", id, r)
		}
	}
	if got := planned() - before; got != size {
		t.Fatalf("a frame of %d operations planned %v operations, want %d", size, got, size)
	}
}

// plannedOps reads l4xg_grid_operations_planned_total from the /metrics of
// the node whose HTTP address is addr.
func plannedOps(t *testing.T, addr string) float64 {
	t.Helper()
	_, body := gridtest.HTTPGet(t, "http://"+addr+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "l4xg_grid_operations_planned_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatal("/metrics lacks l4xg_grid_operations_planned_total")
	return 0
}
