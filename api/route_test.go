package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/internal/gridtest"
	"github.com/l4xg/grid/internal/testwait"
)

// TestClusterRouting runs the routing rules against real Raft leaders and
// followers: three nodes of a real cluster replicate both shards, each
// API server routing by the cluster map. A follower forwards what it
// cannot serve to the real leader, or refuses it with a Redirect naming
// the leader when the request asks for that or was forwarded already; a
// forward that fails on its way is an unknown outcome, never a Redirect.
func TestClusterRouting(t *testing.T) {
	tc := startCluster(t, gridtest.ClusterOptions{})
	l0, l1 := tc.leader(0), tc.leader(1)
	f := tc.follower(0)
	fc := gridtest.Dial(t, f.addr)
	t.Logf("shard 0 led by %s, shard 1 by %s; asking %s", l0.id, l1.id, f.id)

	t.Run("a batch sent to a follower is forwarded, in order", func(t *testing.T) {
		ops := []*gridpb.Op{
			reserveOp(keyOf(t, 0, "fwd", 0)),
			reserveOp(keyOf(t, 1, "fwd", 0)),
			reserveOp(nil), // invalid: fails alone, here
			reserveOp(keyOf(t, 0, "fwd", 1)),
			getOp(keyOf(t, 0, "fwd", 0), false), // after its reserve, on the leader
		}
		resp, err := fc.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: ops})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Results
		for _, i := range []int{0, 1, 3} {
			if r[i].Error != nil || r[i].Outcome != gridpb.Outcome_ACQUIRED {
				t.Errorf("op %d: %v, want ACQUIRED", i, r[i])
			}
		}
		if r[2].Error == nil || codes.Code(r[2].Error.Code) != codes.InvalidArgument {
			t.Errorf("op 2 (no key): %v, want InvalidArgument", r[2])
		}
		if r[4].State != gridpb.State_PROCESSING || r[4].Token != r[0].Token {
			t.Errorf("get after reserve in the forwarded batch: %v, want PROCESSING with token %d", r[4], r[0].Token)
		}
		// The leaders hold what the follower acknowledged.
		for i, l := range map[int]*member{0: l0, 1: l1} {
			k := keyOf(t, i, "fwd", 0)
			got, err := gridtest.Dial(t, l.addr).Get(redirectOnly(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: k, ShowToken: true})
			if err != nil || got.State != gridpb.State_PROCESSING || got.Token != r[i].Token {
				t.Errorf("leader %s of shard %d: %v %v, want PROCESSING with token %d", l.id, i, got, err, r[i].Token)
			}
		}
	})

	t.Run("a batch with grid-redirect gets a Redirect per operation", func(t *testing.T) {
		ops := []*gridpb.Op{reserveOp(keyOf(t, 0, "redir", 0)), reserveOp(keyOf(t, 1, "redir", 0)), reserveOp(keyOf(t, 0, "redir", 1))}
		resp, err := fc.Batch(redirectOnly(t), &gridpb.BatchRequest{Ops: ops})
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, 2} {
			e := resp.Results[i].Error
			if e == nil || codes.Code(e.Code) != codes.Unavailable || !tc.redirectsTo(e.Redirect, 0, l0) {
				t.Errorf("op %d on shard 0: %v, want UNAVAILABLE redirecting to %s at %s", i, resp.Results[i], l0.id, l0.addr)
			}
		}
		if r := resp.Results[1]; f == l1 {
			if r.Error != nil || r.Outcome != gridpb.Outcome_ACQUIRED {
				t.Errorf("op on shard 1, which %s leads: %v, want ACQUIRED here", f.id, r)
			}
		} else if r.Error == nil || !tc.redirectsTo(r.Error.Redirect, 1, l1) {
			t.Errorf("op on shard 1: %v, want a Redirect to %s", r, l1.id)
		}
		got, err := gridtest.Dial(t, l0.addr).Get(redirectOnly(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: keyOf(t, 0, "redir", 0)})
		if err != nil || got.State != gridpb.State_ABSENT {
			t.Errorf("a redirected reserve was applied: %v %v", got, err)
		}
	})

	t.Run("a unary RPC with grid-redirect gets a Redirect status detail", func(t *testing.T) {
		for name, c := range map[string]context.Context{
			"grid-redirect":  redirectOnly(t),
			"grid-forwarded": metadata.AppendToOutgoingContext(gridtest.Context(t), api.MetadataForwarded, "1"),
		} {
			_, err := fc.Reserve(c, &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: keyOf(t, 0, "unary", 0)})
			want := fmt.Sprintf("shard 0 is led by %s at %s", l0.id, l0.addr)
			if status.Code(err) != codes.Unavailable || !tc.redirectsTo(redirectDetail(err), 0, l0) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: reserve on a follower: %v (detail %v), want UNAVAILABLE %q with a Redirect", name, err, redirectDetail(err), want)
			}
		}
	})

	t.Run("unary RPCs sent to a follower are forwarded", func(t *testing.T) {
		k := keyOf(t, 0, "unary", 1)
		res, err := fc.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: k, LeaseMs: 60000})
		if err != nil || res.Outcome != gridpb.Outcome_ACQUIRED {
			t.Fatalf("reserve: %v %v", res, err)
		}
		done, err := fc.Complete(gridtest.Context(t), &gridpb.CompleteRequest{Namespace: []byte("ns"), Key: k, Token: res.Token, Result: []byte("ok")})
		if err != nil || done.Outcome != gridpb.Outcome_OK {
			t.Fatalf("complete: %v %v", done, err)
		}
		got, err := fc.Get(gridtest.Context(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: k})
		if err != nil || got.State != gridpb.State_COMPLETED || string(got.Result) != "ok" {
			t.Fatalf("linearizable get: %v %v", got, err)
		}
		// A stale read is the follower's own: it answers even when asked
		// not to forward, once its replica has applied the completion.
		testwait.For(t, 20*time.Second, "the follower's replica to apply the completion", func() bool {
			got, err := fc.Get(redirectOnly(t), &gridpb.GetRequest{Namespace: []byte("ns"), Key: k, StaleOk: true})
			if err != nil {
				t.Fatalf("stale get on a follower: %v", err)
			}
			return got.State == gridpb.State_COMPLETED
		})
	})

	// Last: it takes the leader's gRPC port away.
	t.Run("a forward that never reaches the leader is refused with its Redirect", func(t *testing.T) {
		tc.CutClientPort(l0.i) // the leader's replica still leads; its API is gone
		// The earlier subtests left the follower a connection to the
		// leader's API, which the cut closes: a forward sent on it before
		// the follower has seen it close may have reached the leader, and
		// is rightly an unknown outcome. Once the follower has seen it, a
		// forward finds no connection: a Redirect.
		attempt := 0
		testwait.Until(t, 20*time.Second, func() string {
			attempt++
			_, err := fc.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: keyOf(t, 0, "lost", attempt*2)})
			switch {
			case status.Code(err) == codes.Unavailable && tc.redirectsTo(redirectDetail(err), 0, l0):
				return ""
			case status.Code(err) == codes.Unavailable && redirectDetail(err) == nil && strings.Contains(err.Error(), "outcome unknown"):
				return fmt.Sprintf("the follower to see its connection to the leader's API closed (last: %v)", err)
			}
			t.Fatalf("reserve forwarded to a gone API: %v (detail %v), want UNAVAILABLE with a Redirect to %s: nothing reached it", err, redirectDetail(err), l0.id)
			return ""
		})
		resp, err := fc.Batch(gridtest.Context(t), &gridpb.BatchRequest{Ops: []*gridpb.Op{reserveOp(keyOf(t, 0, "lost", 1))}})
		if err != nil {
			t.Fatal(err)
		}
		if e := resp.Results[0].Error; e == nil || codes.Code(e.Code) != codes.Unavailable || !tc.redirectsTo(e.Redirect, 0, l0) {
			t.Errorf("batch forwarded to a gone API: %v, want UNAVAILABLE with a Redirect to %s", resp.Results[0], l0.id)
		}
	})
}

// A forward that fails after it reached the leader (the connection closed
// while the leader's proposal waits) may have been applied there: it is an
// unknown outcome, UNAVAILABLE without a Redirect, never a refusal that
// would let the client send the operation again as new.
func TestForwardLostMidCallIsUnknown(t *testing.T) {
	// A long heartbeat timeout keeps the paused leader leading while the
	// test cuts its connection.
	tc := startCluster(t, gridtest.ClusterOptions{HTTP: true, HeartbeatTimeout: 3 * time.Second})
	l0 := tc.leader(0)
	fc := gridtest.Dial(t, tc.follower(0).addr)
	planned := func() float64 { return plannedOps(t, tc.Node(l0.i).HTTPAddr()) }
	before := planned()
	tc.Pause(l0.i) // its proposals wait for followers that do not hear it
	defer tc.Heal()
	done := make(chan error, 1)
	go func() {
		_, err := fc.Reserve(gridtest.Context(t), &gridpb.ReserveRequest{Namespace: []byte("ns"), Key: keyOf(t, 0, "midcall", 0)})
		done <- err
	}()
	testwait.For(t, 10*time.Second, "the forwarded reserve to reach the leader", func() bool { return planned() > before })
	tc.CutClientPort(l0.i)
	err := <-done
	if status.Code(err) != codes.Unavailable || redirectDetail(err) != nil || !strings.Contains(err.Error(), "outcome unknown") {
		t.Errorf("reserve whose forward broke mid-call: %v (detail %v), want UNAVAILABLE, outcome unknown, no Redirect", err, redirectDetail(err))
	}
}
