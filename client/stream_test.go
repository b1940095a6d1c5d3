package client

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
)

// streamOnly serves Stream and nothing else. Its first stream reads one
// frame and ends UNAVAILABLE without answering it; every later stream
// answers each operation ACQUIRED.
type streamOnly struct {
	gridpb.UnimplementedGridServer
	streams atomic.Int32
}

func (g *streamOnly) Stream(st gridpb.Grid_StreamServer) error {
	first := g.streams.Add(1) == 1
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if first {
			return status.Error(codes.Unavailable, "test: the stream broke")
		}
		resp := &gridpb.StreamResponse{Ids: req.Ids}
		for range req.Ids {
			resp.Results = append(resp.Results, &gridpb.OpResult{Outcome: gridpb.Outcome_ACQUIRED, Token: 7, Attempt: 1})
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

func serveGrid(t *testing.T, g gridpb.GridServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	gridpb.RegisterGridServer(s, g)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// A stream that breaks with a call on it leaves the call's outcome unknown
// (the node may have applied it); the next call opens a new stream.
func TestStreamBreakLeavesOutcomeUnknown(t *testing.T) {
	g := &streamOnly{}
	c, err := Dial(testCtx(t), serveGrid(t, g), fastRetry(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Reserve(testCtx(t), "ns", "k")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errUnknown) {
		t.Fatalf("reserve on the breaking stream: %v, want unavailable with outcome unknown", err)
	}
	r, err := c.Reserve(testCtx(t), "ns", "k")
	if err != nil || r.Outcome != OutcomeAcquired {
		t.Fatalf("reserve after the break: %+v, %v", r, err)
	}
	if n := g.streams.Load(); n != 2 {
		t.Fatalf("%d streams opened, want 2", n)
	}
}

// A node without Stream (here the fake, which answers it Unimplemented)
// gets the calls as Batch RPCs, the first one included, which never
// reached it: no call fails for it.
func TestStreamFallsBackToBatch(t *testing.T) {
	c, f := dialFake(t, fastRetry(1))
	r, err := c.Reserve(testCtx(t), "ns", "k")
	if err != nil || r.Outcome != OutcomeAcquired {
		t.Fatalf("first reserve: %+v, %v", r, err)
	}
	if r, err := c.Reserve(testCtx(t), "ns", "k"); !errors.Is(err, ErrBusy) && (err != nil || r.Outcome != OutcomeBusy) {
		t.Fatalf("second reserve: %+v, %v, want busy", r, err)
	}
	if n := f.rpcCount("Batch"); n != 2 {
		t.Fatalf("%d Batch RPCs, want 2", n)
	}
	if !c.seed.b.c.(*streamCarrier).legacy.Load() {
		t.Fatal("the carrier did not switch to Batch RPCs")
	}
}
