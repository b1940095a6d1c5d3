package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/client/internal/wiretap"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/testwait"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Routing tests run against fakeCluster: fake nodes that answer ClusterMap
// and refuse operations on shards they do not lead with Redirects.

// mapEpoch is the epoch of the router's map, 0 without one.
func (r *router) mapEpoch() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.epoch
}

// receivedKeys lists the keys of the operations of one kind a fake applied.
func receivedKeys(f *fakeGrid, kind string) []string {
	var keys []string
	for _, op := range f.received() {
		if k, key := wiretap.OpKey(op); k == kind {
			keys = append(keys, key)
		}
	}
	return keys
}

// wantOnlyAt checks that every key was applied by its shard's leader and by
// no other node.
func wantOnlyAt(t *testing.T, fc *fakeCluster, kind string, keys []string) {
	t.Helper()
	at := map[string][]int{}
	for i, f := range fc.nodes {
		for _, k := range receivedKeys(f, kind) {
			at[k] = append(at[k], i)
		}
	}
	for _, k := range keys {
		want := fc.leader(ReserveOp("ns", k).pb)
		if got := at[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s %s applied by nodes %v, want [%d] only", kind, k, got, want)
		}
	}
}

func TestRoutingSendsEachOperationToItsShardLeader(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		fc := newFakeCluster(t, 3, 6)
		c := fc.dial(t, "", WithBatching(batching))
		ctx := testCtx(t)
		var keys []string
		for s := range 6 {
			for i := range 5 {
				keys = append(keys, fc.keyOn(s, i))
			}
		}
		for _, k := range keys {
			r, err := c.Reserve(ctx, "ns", k)
			if err != nil || r.Outcome != OutcomeAcquired {
				t.Fatalf("reserve %s: %v %v", k, r.Outcome, err)
			}
			if _, err := c.GetDigest(ctx, digest.Key("ns", []byte(k))); err != nil {
				t.Fatalf("get by digest %s: %v", k, err)
			}
		}
		wantOnlyAt(t, fc, "reserve", keys)
		// A Get by digest names no key: that it reached the leader shows as
		// no redirect.
		if n := fc.redirects(); n != 0 {
			t.Fatalf("%d operations were redirected: the client routed them elsewhere", n)
		}
		for i, f := range fc.nodes {
			if _, routed, bare := f.counters(); bare != 0 || routed == 0 {
				t.Errorf("node %d: %d RPCs with grid-redirect, %d without; want all with", i, routed, bare)
			}
		}
	})
}

func TestRoutingFollowsTheEntityShard(t *testing.T) {
	fc := newFakeCluster(t, 3, 6)
	c := fc.dial(t, "")
	ctx := testCtx(t)
	for i := range 20 {
		key, entity := fmt.Sprintf("event-%d", i), fmt.Sprintf("order-%d", i%4)
		_, err := c.Process(ctx, "ns", key, func(context.Context, Lease) ([]byte, error) { return []byte("ok"), nil },
			WithEntity(entity, uint64(i+1)))
		if err != nil {
			t.Fatalf("process %s: %v", key, err)
		}
	}
	// A digest computed without the entity lands on another shard for most
	// of these keys: the nodes would have redirected.
	if n := fc.redirects(); n != 0 {
		t.Fatalf("%d operations redirected", n)
	}
}

// TestRoutingSettlesByToken: settles of keys reserved WithEntity, sent
// without ForEntity, one by one or in an explicit Batch, go straight to the
// leader of the shard their token names (the entity's shard), where the
// grid routes them too: no node has to redirect them.
func TestRoutingSettlesByToken(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		fc := newFakeCluster(t, 3, 6)
		c := fc.dial(t, "", WithBatching(batching))
		ctx := testCtx(t)
		var ops []Op
		moved := 0
		for i := range 24 {
			key, entity := fmt.Sprintf("evt-%d", i), fmt.Sprintf("order-%d", i)
			if fc.shardOf(ReserveOp("ns", key).pb) != fc.shardOf(ReserveOp("ns", key, WithEntity(entity, 1)).pb) {
				moved++
			}
			r, err := c.Reserve(ctx, "ns", key, WithEntity(entity, 1))
			if err != nil || r.Outcome != OutcomeAcquired {
				t.Fatalf("reserve %s: %v %v", key, r.Outcome, err)
			}
			switch i % 4 {
			case 0:
				_, err = c.Complete(ctx, "ns", key, r.Token)
			case 1:
				_, err = c.Extend(ctx, "ns", key, r.Token, time.Minute)
			case 2:
				_, err = c.Fail(ctx, "ns", key, r.Token)
			default:
				ops = append(ops, ReleaseOp("ns", key, r.Token), ExtendOp("ns", key, r.Token, time.Minute))
				continue
			}
			if err != nil {
				t.Fatalf("settle %s without the entity: %v", key, err)
			}
		}
		if _, errs, err := c.Batch(ctx, ops); err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil && !errors.Is(e, ErrLeaseLost) }) {
			t.Fatalf("batch of settles: %v %v", errs, err)
		}
		if moved == 0 {
			t.Fatal("no entity moved its key to another shard: the test proves nothing")
		}
		if n := fc.redirects(); n != 0 {
			t.Fatalf("%d operations redirected: settles were sent by their key, not their token", n)
		}
	})
}

func TestExplicitBatchSplitsByNodeInParallel(t *testing.T) {
	fc := newFakeCluster(t, 3, 3)
	c := fc.dial(t, "", WithBatching(false))
	ctx := testCtx(t)
	var ops []Op
	var keys []string
	for i := range 30 {
		k := fc.keyOn(i%3, i/3)
		keys = append(keys, k)
		if i%2 == 1 { // held already: BUSY
			if _, err := c.Reserve(ctx, "ns", k); err != nil {
				t.Fatal(err)
			}
		}
		ops = append(ops, ReserveOp("ns", k))
	}
	// Each node's Batch RPC waits until all three are in flight: parts sent
	// one after the other would never get there.
	var entered atomic.Int32
	all := make(chan struct{})
	for _, f := range fc.nodes {
		f.setHooks(fakeHooks{rpc: func(ctx context.Context, method string) error {
			if method != "Batch" {
				return nil
			}
			if entered.Add(1) == 3 {
				close(all)
			}
			select {
			case <-all:
				return nil
			case <-time.After(5 * time.Second):
				return status.Error(codes.Internal, "the nodes' parts were not sent in parallel")
			}
		}})
	}
	results, errs, err := c.Batch(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		want := OutcomeAcquired
		if i%2 == 1 {
			want = OutcomeBusy
		}
		if errs[i] != nil || r.Outcome != want {
			t.Errorf("op %d (%s): %v %v, want %v", i, keys[i], r.Outcome, errs[i], want)
		}
	}
	for i, f := range fc.nodes {
		if got := f.sizes(); len(got) != 1 || got[0] != 10 {
			t.Errorf("node %d: Batch sizes %v, want one of 10", i, got)
		}
	}
	if n := fc.redirects(); n != 0 {
		t.Fatalf("%d redirects", n)
	}
}

func TestRedirectMovesTheLeaderCache(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		fc := newFakeCluster(t, 2, 2)
		fc.move(0, 1, false) // the map still names node 0
		c := fc.dial(t, "", WithBatching(batching))
		ctx := testCtx(t)

		r, sends, err := c.one(ctx, ReserveOp("ns", fc.keyOn(0, 0)))
		if err != nil || r.Outcome != OutcomeAcquired {
			t.Fatalf("reserve: %v %v", r.Outcome, err)
		}
		if sends != 1 {
			t.Fatalf("%d sends counted; a redirected send is not one", sends)
		}
		if got, _, _ := fc.nodes[0].counters(); got != 1 {
			t.Fatalf("node 0 redirected %d operations, want 1", got)
		}
		// The next operations on the shard go to node 1 at once.
		if _, err := c.Reserve(ctx, "ns", fc.keyOn(0, 1)); err != nil {
			t.Fatal(err)
		}
		if _, errs, err := c.Batch(ctx, []Op{ReserveOp("ns", fc.keyOn(0, 2)), ReserveOp("ns", fc.keyOn(1, 0))}); err != nil || errs[0] != nil || errs[1] != nil {
			t.Fatalf("batch: %v %v", errs, err)
		}
		if got, _, _ := fc.nodes[0].counters(); got != 1 {
			t.Fatalf("node 0 redirected %d operations, want still 1", got)
		}
		wantOnlyAt(t, fc, "reserve", []string{fc.keyOn(0, 0), fc.keyOn(0, 1), fc.keyOn(0, 2), fc.keyOn(1, 0)})
	})
}

func TestExplicitBatchResendsRedirectedOperations(t *testing.T) {
	fc := newFakeCluster(t, 3, 3)
	fc.move(0, 2, false) // the map names node 0
	c := fc.dial(t, "")
	var ops []Op
	var keys []string
	for i := range 12 {
		k := fc.keyOn(i%3, i/3)
		keys = append(keys, k)
		ops = append(ops, ReserveOp("ns", k))
	}
	results, errs, err := c.Batch(testCtx(t), ops)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		if errs[i] != nil || results[i].Outcome != OutcomeAcquired {
			t.Errorf("op %d: %v %v", i, results[i].Outcome, errs[i])
		}
	}
	if got, _, _ := fc.nodes[0].counters(); got != 4 {
		t.Fatalf("node 0 redirected %d operations, want the 4 of shard 0", got)
	}
	wantOnlyAt(t, fc, "reserve", keys)
}

func TestNewerEpochRefreshesTheMap(t *testing.T) {
	fc := newFakeCluster(t, 3, 3)
	c := fc.dial(t, "")
	ctx := testCtx(t)
	if _, err := c.Reserve(ctx, "ns", fc.keyOn(0, 0)); err != nil {
		t.Fatal(err)
	}
	if got := c.r.mapEpoch(); got != 1 {
		t.Fatalf("epoch %d, want 1", got)
	}
	fc.move(0, 1, true) // epoch 2
	fc.move(1, 2, true) // epoch 3

	// Node 0 redirects shard 0 with epoch 3: the client follows, and
	// refreshes its map.
	if _, err := c.Reserve(ctx, "ns", fc.keyOn(0, 1)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the map of epoch 3", func() bool { return c.r.mapEpoch() == 3 })
	// Shard 1 moved without any Redirect telling the client: only the
	// refreshed map sends its operations to node 2 directly.
	before, _, _ := fc.nodes[1].counters()
	if _, err := c.Reserve(ctx, "ns", fc.keyOn(1, 0)); err != nil {
		t.Fatal(err)
	}
	if after, _, _ := fc.nodes[1].counters(); after != before {
		t.Fatalf("node 1 redirected shard 1's operation: the map was not refreshed")
	}
	wantOnlyAt(t, fc, "reserve", []string{fc.keyOn(0, 1), fc.keyOn(1, 0)})
}

// ping-pong makes each of two nodes redirect everything to the other.
func pingPong(fc *fakeCluster) {
	fc.setOverride(func(self, shard int) *gridpb.Redirect {
		other := 1 - self
		return &gridpb.Redirect{Shard: uint32(shard), LeaderId: fakeNodeID(other), LeaderAddr: fc.addrs[other], Epoch: 1}
	})
}

func TestRedirectLoopStopsAfterTheCap(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		fc := newFakeCluster(t, 2, 2)
		c := fc.dial(t, "", WithBatching(batching), fastRetry(2))
		pingPong(fc)
		_, sends, err := c.one(testCtx(t), ReserveOp("ns", "k"))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "redirects") {
			t.Fatalf("err = %v, want ErrUnavailable naming the redirects", err)
		}
		if sends != 0 {
			t.Fatalf("%d sends counted; redirected sends are not applied", sends)
		}
		// Two attempts of the policy, each the send and maxRedirects more.
		if got, want := fc.redirects(), 2*(maxRedirects+1); got != want {
			t.Fatalf("%d redirects, want %d", got, want)
		}
		for i, f := range fc.nodes {
			if n := len(f.received()); n != 0 {
				t.Fatalf("node %d applied %d operations", i, n)
			}
		}
	})
}

func TestExplicitBatchRedirectLoopStopsAfterTheCap(t *testing.T) {
	fc := newFakeCluster(t, 2, 2)
	c := fc.dial(t, "", fastRetry(2))
	pingPong(fc)
	ops := []Op{ReserveOp("ns", fc.keyOn(0, 0)), ReserveOp("ns", fc.keyOn(1, 0))}
	_, errs, err := c.Batch(testCtx(t), ops)
	if err != nil {
		t.Fatalf("err = %v: every operation was answered", err)
	}
	for i, e := range errs {
		if !errors.Is(e, ErrUnavailable) || !strings.Contains(e.Error(), "redirects") {
			t.Errorf("op %d: %v, want ErrUnavailable naming the redirects", i, e)
		}
	}
	if got, want := fc.redirects(), len(ops)*2*(maxRedirects+1); got != want {
		t.Fatalf("%d redirects, want %d", got, want)
	}
}

func TestRedirectWithoutLeaderBacksOffAndRefreshes(t *testing.T) {
	fc := newFakeCluster(t, 2, 2)
	c := fc.dial(t, "", fastRetry(2))
	ctx := testCtx(t)
	if _, err := c.Reserve(ctx, "ns", fc.keyOn(1, 0)); err != nil { // the map is in
		t.Fatal(err)
	}
	maps := fc.nodes[0].rpcCount("ClusterMap") + fc.nodes[1].rpcCount("ClusterMap")
	var electing atomic.Int32
	fc.setOverride(func(self, shard int) *gridpb.Redirect {
		if shard == 0 && electing.Add(1) <= 2 { // twice "no leader", then node 0 leads
			return &gridpb.Redirect{Shard: 0, Epoch: 1}
		}
		if shard == 0 && self == 0 || shard == 1 && self == 1 {
			return nil
		}
		return &gridpb.Redirect{Shard: uint32(shard), LeaderId: fakeNodeID(shard), LeaderAddr: fc.addrs[shard], Epoch: 1}
	})
	r, sends, err := c.one(ctx, ReserveOp("ns", fc.keyOn(0, 0)))
	if err != nil || r.Outcome != OutcomeAcquired || sends != 1 {
		t.Fatalf("reserve: %v, %d sends, %v", r.Outcome, sends, err)
	}
	testwait.For(t, 10*time.Second, "a map refresh", func() bool {
		return fc.nodes[0].rpcCount("ClusterMap")+fc.nodes[1].rpcCount("ClusterMap") > maps
	})
}

func TestUnreachableLeaderIsAvoidedAndTheMapRefreshed(t *testing.T) {
	modes(t, func(t *testing.T, batching bool) {
		fc := newFakeCluster(t, 3, 3)
		c := fc.dial(t, "", WithBatching(batching),
			WithRetryPolicy(RetryPolicy{Attempts: 20, BaseBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}))
		ctx := testCtx(t)
		if _, err := c.Reserve(ctx, "ns", fc.keyOn(1, 0)); err != nil {
			t.Fatal(err)
		}
		fc.nodes[1].shutdown()
		fc.move(1, 2, true)
		// The send to the lost leader fails (refused, or reset on a
		// connection it was already on: then it counts as possibly
		// applied); the retry is applied by node 2, once.
		r, sends, err := c.one(ctx, ReserveOp("ns", fc.keyOn(1, 1)))
		if err != nil || r.Outcome != OutcomeAcquired || sends < 1 {
			t.Fatalf("reserve: %v %v, %d sends", r.Outcome, err, sends)
		}
		if got := receivedKeys(fc.nodes[2], "reserve"); len(got) != 1 || got[0] != fc.keyOn(1, 1) {
			t.Fatalf("node 2 applied %v", got)
		}
		testwait.For(t, 10*time.Second, "the map of epoch 2", func() bool { return c.r.mapEpoch() == 2 })
	})
}

func TestUnreachableLeaderIsAvoidedWhileTheMapStillNamesIt(t *testing.T) {
	fc := newFakeCluster(t, 3, 3)
	c := fc.dial(t, "", WithRetryPolicy(RetryPolicy{Attempts: 5, BaseBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}))
	ctx := testCtx(t)
	if _, err := c.Reserve(ctx, "ns", fc.keyOn(1, 0)); err != nil {
		t.Fatal(err)
	}
	fc.nodes[1].shutdown()
	fc.move(1, 2, false) // the map still names node 1
	r, err := c.Reserve(ctx, "ns", fc.keyOn(1, 1))
	if err != nil || r.Outcome != OutcomeAcquired {
		t.Fatalf("reserve: %v %v", r.Outcome, err)
	}
	// Another replica of the shard was asked and redirected to node 2.
	if got := receivedKeys(fc.nodes[2], "reserve"); len(got) != 1 || got[0] != fc.keyOn(1, 1) {
		t.Fatalf("node 2 applied %v", got)
	}
}

func TestNodeOlderThanClusteringIsStandalone(t *testing.T) {
	c, f := dialFake(t)
	ctx := testCtx(t)
	if _, err := c.Reserve(ctx, "ns", "k"); err != nil {
		t.Fatal(err)
	}
	m, err := c.ClusterMap(ctx)
	if err != nil || !m.Standalone || m.Epoch != 0 || len(m.Nodes) != 0 {
		t.Fatalf("cluster map: %+v %v", m, err)
	}
	if f.rpcCount("ClusterMap") < 2 {
		t.Fatalf("%d ClusterMap RPCs", f.rpcCount("ClusterMap"))
	}
	c.r.mu.RLock()
	mode, single := c.r.mode, c.r.single
	c.r.mu.RUnlock()
	if mode != modeSingle || single != c.seed.addr {
		t.Fatalf("mode %v to %q, want everything to the seed", mode, single)
	}
}

func TestWithoutRoutingSendsEverythingToTheSeed(t *testing.T) {
	fc := newFakeCluster(t, 3, 3)
	c := fc.dial(t, "", WithoutRouting())
	ctx := testCtx(t)
	var keys []string
	for s := range 3 {
		keys = append(keys, fc.keyOn(s, 0))
	}
	for _, k := range keys {
		if _, err := c.Reserve(ctx, "ns", k); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.Batch(ctx, []Op{GetOp("ns", keys[1]), GetOp("ns", keys[2])}); err != nil {
		t.Fatal(err)
	}
	if got := receivedKeys(fc.nodes[0], "reserve"); len(got) != 3 {
		t.Fatalf("the seed applied %v, want all 3 (it forwards)", got)
	}
	if got := receivedKeys(fc.nodes[0], "get"); len(got) != 2 {
		t.Fatalf("the seed applied gets %v", got)
	}
	for i, f := range fc.nodes {
		if _, routed, _ := f.counters(); routed != 0 || f.rpcCount("ClusterMap") != 0 {
			t.Errorf("node %d: %d RPCs asked for redirects, %d map fetches", i, routed, f.rpcCount("ClusterMap"))
		}
	}
}

func TestClusterMapDescribesTheCluster(t *testing.T) {
	fc := newFakeCluster(t, 3, 4)
	fc.move(3, 2, true) // epoch 2; shard 3 led by n2
	c := fc.dial(t, fc.addrs[1])
	m, err := c.ClusterMap(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.Standalone || m.Epoch != 2 || m.Slots != 64 || m.ShardCount != 4 || m.Replicas != 3 || m.ControlLeader != "n0" {
		t.Fatalf("map: %+v", m)
	}
	if len(m.Nodes) != 3 || m.Nodes[2].ID != "n2" || m.Nodes[2].GRPCAddr != fc.addrs[2] || m.Nodes[2].State != "active" || !m.Nodes[2].Alive {
		t.Fatalf("nodes: %+v", m.Nodes)
	}
	if len(m.Shards) != 4 || m.Shards[3].Leader != "n2" || len(m.Shards[3].Replicas) != 3 || m.Shards[3].Replicas[0] != "n2" {
		t.Fatalf("shards: %+v", m.Shards)
	}
}

func TestDialRefusesAnEmptySeedList(t *testing.T) {
	for _, addr := range []string{"", " , ,"} {
		if _, err := Dial(context.Background(), addr); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Dial(%q) = %v, want ErrInvalidArgument", addr, err)
		}
	}
}

func TestConcurrentRoutingUnderLeaderMoves(t *testing.T) {
	fc := newFakeCluster(t, 3, 6)
	c := fc.dial(t, "", fastRetry(5))
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if g == 0 && i%5 == 0 {
					fc.move(i%6, (i/5)%3, i%2 == 0)
				}
				k := fmt.Sprintf("g%d-%d", g, i)
				if r, err := c.Reserve(ctx, "ns", k); err != nil || r.Outcome != OutcomeAcquired {
					errs <- fmt.Errorf("%s: %v %v", k, r.Outcome, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestExplicitBatchKeepsAnUnknownOutcomeUnknown(t *testing.T) {
	c, f := dialFake(t, fastRetry(2))
	var rpcs atomic.Int32
	f.setHooks(fakeHooks{
		rpc: func(_ context.Context, method string) error {
			if method == "Batch" && rpcs.Add(1) == 1 {
				return status.Error(codes.Unavailable, "connection reset") // maybe applied
			}
			return nil
		},
		op: func(*gridpb.Op) error { return status.Error(codes.Unavailable, "shard 0: no leader") },
	})
	_, errs, err := c.Batch(testCtx(t), []Op{ReserveOp("ns", "a")})
	if err != nil {
		t.Fatalf("err = %v: the last RPC answered", err)
	}
	if !errors.Is(errs[0], ErrUnavailable) || !strings.Contains(errs[0].Error(), "outcome unknown") {
		t.Fatalf("errs[0] = %v, want an unknown outcome", errs[0])
	}
}

func TestExplicitBatchRedirectedOnlyIsNotUnknown(t *testing.T) {
	fc := newFakeCluster(t, 2, 2)
	c := fc.dial(t, "", fastRetry(1))
	pingPong(fc)
	_, errs, _ := c.Batch(testCtx(t), []Op{ReserveOp("ns", "a")})
	if !errors.Is(errs[0], ErrUnavailable) || strings.Contains(errs[0].Error(), "outcome unknown") {
		t.Fatalf("errs[0] = %v: only Redirects, so not applied", errs[0])
	}
}

// TestLeaderThatWasStartingIsFollowed: a node that refused an operation
// because it was still starting (a restart) is avoided, but once another
// replica names it the shard's leader it has started: the operation
// follows that Redirect instead of asking the replicas, which keep naming
// it, until downFor has passed. (The grid moves leaderships back to a
// restarted node's preferred shards.)
func TestLeaderThatWasStartingIsFollowed(t *testing.T) {
	fc := newFakeCluster(t, 3, 3)
	c := fc.dial(t, "", fastRetry(1))
	ctx := testCtx(t)
	if _, err := c.Reserve(ctx, "ns", fc.keyOn(0, 0)); err != nil { // the map is in
		t.Fatal(err)
	}
	var started atomic.Bool
	fc.setOverride(func(self, shard int) *gridpb.Redirect {
		if self == 2 && started.CompareAndSwap(false, true) {
			return &gridpb.Redirect{Epoch: 1, Reason: gridpb.ReasonStarting}
		}
		if self == shard {
			return nil
		}
		return &gridpb.Redirect{Shard: uint32(shard), LeaderId: fakeNodeID(shard), LeaderAddr: fc.addrs[shard], Epoch: 1}
	})
	r, _, err := c.one(ctx, ReserveOp("ns", fc.keyOn(2, 0)))
	if err != nil || r.Outcome != OutcomeAcquired {
		t.Fatalf("reserve: %v %v", r.Outcome, err)
	}
	if !started.Load() {
		t.Fatal("node 2 never refused as starting: the test proves nothing")
	}
	if got := receivedKeys(fc.nodes[2], "reserve"); !slices.Contains(got, fc.keyOn(2, 0)) {
		t.Fatalf("node 2 applied %v", got)
	}
}

// TestLeaderWaitPollsThroughAnElection: with the default retry policy, the
// pauses after Redirects that name no leader are at most maxLeaderPoll for
// the first electionPolls, which together outlast an election of the
// grid's defaults (a follower campaigns at most two heartbeat timeouts of
// 500 ms after the leader's last word), so a client learns of the new
// leader soon after it is elected; then the policy's backoff spaces them.
func TestLeaderWaitPollsThroughAnElection(t *testing.T) {
	p := DefaultRetryPolicy()
	c := &Client{cfg: config{retry: p}}
	for range 100 { // the waits are jittered
		var total time.Duration
		for n := 1; n <= electionPolls; n++ {
			d := c.leaderWait(n)
			if d > maxLeaderPoll || d < minLeaderWait {
				t.Fatalf("pause after no-leader Redirect %d: %v, want within [%v, %v]", n, d, minLeaderWait, maxLeaderPoll)
			}
			total += d
		}
		if total < time.Second {
			t.Fatalf("the first %d pauses last %v, shorter than an election (1 s)", electionPolls, total)
		}
		for n := electionPolls + 1; n <= electionPolls+4; n++ {
			if d := c.leaderWait(n); d < p.MaxBackoff/2 {
				t.Fatalf("pause after no-leader Redirect %d: %v, want the policy's backoff (at least %v)", n, d, p.MaxBackoff/2)
			}
		}
	}
}

func TestStandaloneAnswerKeepsOneNode(t *testing.T) {
	f := newFakeGrid()
	f.standalone = true
	addr := serveFake(t, f)
	// The first seed is down: the second answers, standalone.
	c, err := Dial(context.Background(), closedAddr(t)+", "+addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	for i := range 10 {
		if r, err := c.Reserve(ctx, "ns", fmt.Sprint(i)); err != nil || r.Outcome != OutcomeAcquired {
			t.Fatalf("reserve: %v %v", r.Outcome, err)
		}
	}
	if got := len(receivedKeys(f, "reserve")); got != 10 {
		t.Fatalf("the standalone node applied %d reserves, want 10", got)
	}
	m, err := c.ClusterMap(ctx)
	if err != nil || !m.Standalone {
		t.Fatalf("cluster map: %+v %v", m, err)
	}
}
