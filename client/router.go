package client

// Routing: which node gets an operation (docs/design.md section 5).
//
// The digest space of a clustered grid is cut into slots, the slots into
// shards, and each shard is a Raft group whose leader alone applies its
// operations. The router holds the cluster map, fetched with the ClusterMap
// RPC: the slot and shard counts, the nodes' gRPC addresses and, per shard,
// its replicas and leader. For each operation it computes the record digest
// as the grid does (digest.Record; a Get by digest uses the digest it
// carries), the digest's slot and the slot's shard, and picks the shard's
// leader; a settle (Complete, Fail, Release, Extend) goes to the shard its
// token names (digest.TokenShard), as the grid routes it, so it reaches a
// key reserved WithEntity without ForEntity. Each node has its own
// connection and batcher (nodes.go).
//
// Every operation RPC of a routing client carries the grid-redirect header:
// a node that does not lead the shard refuses the operation with a Redirect
// naming the leader, instead of forwarding it. A refused operation was not
// applied, so send resends it at once to the named leader, without counting
// a send, and the router remembers that leader for the shard. A Redirect
// naming no leader (an election runs), or naming the node that sent it (it
// takes itself for the leader but could not serve), makes the client refresh
// the map and back off briefly, then try the map's leader or the shard's
// replicas in turn; a Redirect with a newer map epoch than the router's
// refreshes the map. After maxRedirects
// redirects a send gives up with ErrUnavailable, which the retry policy may
// send again.
//
// A Redirect with a reason is a node that cannot serve at all (starting,
// removed: avoided like an unreachable node) or holds no replica of the
// shard (not a member: the map is refreshed). A Redirect naming a leader
// the router avoids is not followed; the shard's replicas are tried
// instead, and they name the new leader once it is elected. The exception
// is a node avoided because it refused as starting: a replica naming it
// the leader has heard from it as one since, so it is followed.
//
// A node that cannot be reached, answers Unavailable without a Redirect,
// or does not answer within the send timeout, is avoided for downFor where
// its shard has another replica (which then redirects to the leader), no
// shard is taken to be led by it, and the map is refreshed; the retry
// policy resends the operation, counting the failed send as possibly
// applied unless the request never left.
//
// Map fetches are single-flight and start at least refreshInterval apart;
// they ask the map's nodes, then the seeds, and install the first answer that
// is not older than the map held. Until the first answer, operations wait for
// the fetch (bounded by their context), then go to the first seed. A
// standalone node, or one older than the ClusterMap RPC (Unimplemented), gets
// every operation, as the first seed does for a client built WithoutRouting.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// maxRedirects is how many Redirects one send of an operation follows.
	maxRedirects = 8
	// refreshInterval is the least time between the starts of two map
	// fetches, so that a burst of failures costs one fetch.
	refreshInterval = 100 * time.Millisecond
	// fetchTimeout bounds one ClusterMap RPC to one node.
	fetchTimeout = 2 * time.Second
	// downFor is how long a node that failed a send (unreachable, no answer
	// within the send timeout, refusing to serve) is avoided when its shard
	// has another replica to ask: about an election and a half, so that a
	// frozen leader is not asked again before its followers have elected
	// another.
	downFor = 2 * time.Second
	// minLeaderWait is the least pause after a Redirect that named no
	// leader (leaderWait).
	minLeaderWait = 10 * time.Millisecond
	// maxLeaderPoll caps the pause after each of the first electionPolls
	// Redirects that named no leader. An election after a leader fails
	// takes about a second (the grid's heartbeat timeout is 500 ms, and a
	// follower waits up to twice that before it campaigns); asked at
	// least this often meanwhile, a replica names the new leader to the
	// client at most this long after it is elected. Past electionPolls
	// the retry policy's backoff alone spaces the asks, so an outage
	// longer than an election is not polled as often.
	maxLeaderPoll = 100 * time.Millisecond
	electionPolls = 24
)

// errStaleMap: a node answered with a map older than the router's.
var errStaleMap = errors.New("client: stale cluster map")

type routeMode uint8

const (
	modeUnknown routeMode = iota // no node has answered yet
	modeSingle                   // a standalone node, or WithoutRouting
	modeCluster                  // by the cluster map
)

// shardRoute is what the router knows of one shard: gRPC addresses.
type shardRoute struct {
	leader   string   // "" when unknown
	replicas []string // the preferred leader first
}

// router decides which node each operation goes to. It is safe for
// concurrent use; lookups take a read lock.
type router struct {
	root   context.Context // cancelled when the client closes
	seeds  []string
	fixed  bool // WithoutRouting: always the first seed, no fetches
	fetch  func(ctx context.Context, addr string) (*gridpb.ClusterMapResponse, error)
	closed chan struct{} // closed at once: what refresh returns when it starts nothing
	wg     sync.WaitGroup

	mu         sync.RWMutex
	mode       routeMode
	single     string // modeSingle: the node
	epoch      uint64
	slots      uint32
	shards     []shardRoute
	members    []string                   // the map's nodes, those seen alive first
	last       *gridpb.ClusterMapResponse // the map or standalone answer installed last; read only
	down       map[string]downMark        // nodes that failed a send or refused to serve
	refreshing chan struct{}              // closed when the running fetch ends; nil if none
	lastFetch  time.Time
	stopped    bool
}

func newRouter(root context.Context, seeds []string, fixed bool, fetch func(context.Context, string) (*gridpb.ClusterMapResponse, error)) *router {
	r := &router{root: root, seeds: seeds, fixed: fixed, fetch: fetch, closed: make(chan struct{}), down: map[string]downMark{}}
	close(r.closed)
	if fixed {
		r.mode, r.single = modeSingle, seeds[0]
	}
	return r
}

// close waits for a running fetch, which the client's closing cancels, and
// starts no other.
func (r *router) close() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.wg.Wait()
}

// routeKey is an operation's record digest, computed on first use: only a
// client routing by a cluster map needs it.
type routeKey struct {
	op   *gridpb.Op
	d    digest.Digest
	ok   bool
	done bool
}

func (k *routeKey) digest() (digest.Digest, bool) {
	if !k.done {
		k.d, k.ok = digestOf(k.op)
		k.done = true
	}
	return k.d, k.ok
}

// shardIn is the shard k's operation goes to in a grid of slots slots and
// shards shards, as the grid routes it: the shard a settle's token names,
// else its record digest's. ok is false when it has no digest (a Get whose
// raw digest is not 16 bytes).
func (k *routeKey) shardIn(slots uint32, shards int) (int, bool) {
	if tok := k.op.Token(); tok != 0 {
		if s, ok := digest.TokenShard(tok, shards); ok {
			return s, true
		}
	}
	d, ok := k.digest()
	if !ok {
		return 0, false
	}
	return d.Shard(slots, shards), true
}

// digestOf is the record digest the grid computes for op (api/convert.go);
// ok is false for an empty operation, and for a Get whose raw digest is not
// digest.Size bytes, which any node refuses.
func digestOf(op *gridpb.Op) (digest.Digest, bool) {
	if raw := op.GetGet().GetDigest(); raw != nil {
		return digest.Decode(raw)
	}
	k := op.Request()
	if k == nil {
		return digest.Digest{}, false
	}
	return digest.Record(string(k.GetNamespace()), k.GetKey(), k.GetEntity()), true
}

// target is the node to send k's operation to. probe > 0 after Redirects
// that named no leader: the shard's replicas are tried in turn. Before the
// first map answer it waits for the fetch, then falls back to the first
// seed; the error is that of ctx ending meanwhile.
func (r *router) target(ctx context.Context, k *routeKey, probe int) (string, error) {
	for waited := false; ; waited = true {
		r.mu.RLock()
		switch r.mode {
		case modeSingle:
			a := r.single
			r.mu.RUnlock()
			return a, nil
		case modeCluster:
			a := r.pick(k, probe)
			r.mu.RUnlock()
			return a, nil
		}
		r.mu.RUnlock()
		if waited {
			return r.seeds[0], nil
		}
		select {
		case <-r.refresh():
		case <-ctx.Done():
			return "", ctxDone(ctx)
		}
	}
}

// pick chooses a node of k's shard: the leader unless it is unknown or
// down, else the replicas from probe on. r.mu is held.
func (r *router) pick(k *routeKey, probe int) string {
	s, ok := k.shardIn(r.slots, len(r.shards))
	if !ok {
		return r.seeds[0]
	}
	sh := r.shards[s]
	if sh.leader != "" && !r.isDown(sh.leader) {
		return sh.leader
	}
	for i := range sh.replicas {
		if a := sh.replicas[(probe+i)%len(sh.replicas)]; !r.isDown(a) {
			return a
		}
	}
	switch {
	case sh.leader != "":
		return sh.leader
	case len(sh.replicas) > 0:
		return sh.replicas[probe%len(sh.replicas)]
	}
	return r.seeds[0]
}

// downMark is when a node failed a send or refused to serve, and whether
// it refused because it was starting.
type downMark struct {
	at       time.Time
	starting bool
}

// isDown reports a node that failed a send less than downFor ago. r.mu is
// held.
func (r *router) isDown(addr string) bool {
	d, ok := r.down[addr]
	return ok && time.Since(d.at) < downFor
}

// redirected learns from a Redirect that node from answered: the shard's
// leader, or that from does not lead it; a map refresh when the Redirect
// names no other leader, carries a newer epoch or says the node holds no
// replica of the shard (not a member). A node that refuses to serve at all
// (starting, removed) is avoided like an unreachable one. It returns the
// leader to send the operation to next, or "" when the Redirect names none,
// or names a node that is avoided: the caller then pauses and asks the
// shard's other replicas.
func (r *router) redirected(from string, rd *gridpb.Redirect) string {
	leader := namedLeader(from, rd)
	if refusesAll(rd) {
		r.markDown(from, rd.GetReason() == gridpb.ReasonStarting)
	}
	r.mu.Lock()
	// A node that holds no replica of the shard was asked: the client's
	// map is behind, too.
	refresh := r.mode != modeCluster || rd.GetEpoch() > r.epoch || leader == "" || rd.GetReason() == gridpb.ReasonNotMember
	if r.mode == modeCluster && int(rd.GetShard()) < len(r.shards) && !refusesAll(rd) {
		sh := &r.shards[rd.GetShard()]
		switch {
		case leader != "":
			sh.leader = leader
		case sh.leader == from:
			sh.leader = ""
		}
	}
	if leader != "" && r.isDown(leader) {
		if r.down[leader].starting {
			// It refused because it was starting, and a replica has
			// heard from it as the leader since: it has started (a
			// restarted node gets its preferred leaderships back).
			delete(r.down, leader)
		} else {
			// A follower names a leader this client could not reach:
			// most likely the node that just failed, before the
			// election ends.
			leader, refresh = "", true
		}
	}
	r.mu.Unlock()
	if refresh {
		r.refresh()
	}
	return leader
}

// refusesAll reports a Redirect of a node that cannot serve any operation
// now: it is starting or was removed. Its shard field says nothing.
func refusesAll(rd *gridpb.Redirect) bool {
	switch rd.GetReason() {
	case gridpb.ReasonStarting, gridpb.ReasonRemoved:
		return true
	}
	return false
}

// namedLeader is the leader a Redirect from the node at from sends an
// operation to, or "" when it names none or names from itself: the node
// takes itself for the leader but could not serve (leadership is moving).
// Either way the client pauses, refreshes its map and tries again.
func namedLeader(from string, rd *gridpb.Redirect) string {
	if a := rd.GetLeaderAddr(); a != from {
		return a
	}
	return ""
}

// unreachable notes that a send to addr failed as unavailable, or that the
// node refused to serve: it is avoided for downFor, no shard is taken to be
// led by it until a Redirect or the map says so again, and the map is
// refreshed.
func (r *router) unreachable(addr string) { r.markDown(addr, false) }

// markDown is unreachable, for a node that refused to serve because it
// was starting when starting is set.
func (r *router) markDown(addr string, starting bool) {
	if r.fixed {
		return
	}
	now := time.Now()
	r.mu.Lock()
	for a, d := range r.down {
		if now.Sub(d.at) >= downFor {
			delete(r.down, a)
		}
	}
	r.down[addr] = downMark{at: now, starting: starting}
	for i := range r.shards {
		if r.shards[i].leader == addr {
			r.shards[i].leader = ""
		}
	}
	r.mu.Unlock()
	r.refresh()
}

// clustered reports whether operations are routed by a cluster map, so
// that a failed node has others to stand in for it.
func (r *router) clustered() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.mode == modeCluster
}

// refresh starts a map fetch in the background unless one runs already,
// and returns a channel closed when it ends. A fetch starts no sooner than
// refreshInterval after the previous one started.
func (r *router) refresh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refreshing != nil {
		return r.refreshing
	}
	if r.fixed || r.stopped {
		return r.closed
	}
	done := make(chan struct{})
	r.refreshing = done
	wait := time.Until(r.lastFetch.Add(refreshInterval))
	r.wg.Add(1)
	go r.runRefresh(done, wait)
	return done
}

func (r *router) runRefresh(done chan struct{}, wait time.Duration) {
	defer r.wg.Done()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.root.Done():
			t.Stop()
		}
	}
	if r.root.Err() == nil {
		r.mu.Lock()
		r.lastFetch = time.Now()
		r.mu.Unlock()
		// A failed fetch changes nothing: operations go where the router
		// already sends them, and their failures ask again.
		_, _ = r.fetchMap(r.root, false)
	}
	r.mu.Lock()
	r.refreshing = nil
	r.mu.Unlock()
	close(done)
}

// fetchMap asks the map's nodes that are not down, the seeds, then the
// other nodes for the cluster map, and installs the first answer. A map
// older than the router's is skipped, or returned without being installed
// when anyEpoch is set.
func (r *router) fetchMap(ctx context.Context, anyEpoch bool) (*gridpb.ClusterMapResponse, error) {
	var errs []error
	for _, addr := range r.candidates() {
		m, err := r.fetch(ctx, addr)
		if err == nil {
			err = r.install(addr, m)
			if err == nil || (anyEpoch && errors.Is(err, errStaleMap)) {
				return m, nil
			}
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return nil, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, fmt.Errorf("client: no node gave the cluster map: %w", errors.Join(errs...))
}

// candidates lists the nodes to ask for the map, each once.
func (r *router) candidates() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := make(map[string]bool, len(r.members)+len(r.seeds))
	out := make([]string, 0, len(r.members)+len(r.seeds))
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, a := range r.members {
		if !r.isDown(a) {
			add(a)
		}
	}
	for _, a := range r.seeds {
		add(a)
	}
	for _, a := range r.members {
		add(a)
	}
	return out
}

// install makes m, the answer of the node at from, the router's map.
func (r *router) install(from string, m *gridpb.ClusterMapResponse) error {
	if r.fixed {
		return nil
	}
	if m.GetStandalone() {
		r.mu.Lock()
		r.mode, r.single, r.epoch, r.slots, r.shards, r.members, r.last = modeSingle, from, 0, 0, nil, nil, m
		r.mu.Unlock()
		return nil
	}
	slots, shards, members, err := routesOf(m)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mode == modeCluster && m.GetEpoch() < r.epoch {
		return fmt.Errorf("%w: epoch %d, the client holds %d", errStaleMap, m.GetEpoch(), r.epoch)
	}
	r.mode, r.epoch, r.slots, r.shards, r.members, r.last = modeCluster, m.GetEpoch(), slots, shards, members, m
	return nil
}

// routesOf reads the routes of a cluster map answer.
func routesOf(m *gridpb.ClusterMapResponse) (slots uint32, shards []shardRoute, members []string, err error) {
	slots, n := m.GetSlots(), int(m.GetShardCount())
	if slots == 0 || n == 0 || n > int(slots) {
		return 0, nil, nil, fmt.Errorf("%w: cluster map of %d shards over %d slots", errProtocol, n, slots)
	}
	addrs := make(map[string]string, len(m.GetNodes()))
	var alive, others []string
	for _, nd := range m.GetNodes() {
		a := nd.GetGrpcAddr()
		if a == "" {
			continue
		}
		addrs[nd.GetId()] = a
		switch {
		case nd.GetState() == "removed":
		case nd.GetAlive():
			alive = append(alive, a)
		default:
			others = append(others, a)
		}
	}
	shards = make([]shardRoute, n)
	for _, sh := range m.GetShards() {
		if int(sh.GetId()) >= n {
			return 0, nil, nil, fmt.Errorf("%w: cluster map names shard %d of %d", errProtocol, sh.GetId(), n)
		}
		route := &shards[sh.GetId()]
		route.leader = addrs[sh.GetLeader()]
		for _, id := range sh.GetReplicas() {
			if a := addrs[id]; a != "" {
				route.replicas = append(route.replicas, a)
			}
		}
	}
	return slots, shards, append(alive, others...), nil
}

// askMap is the router's fetch: one ClusterMap RPC to the node at addr,
// bounded by fetchTimeout. A node older than the RPC (Unimplemented) is
// standalone: clustering came with the RPC.
func (c *Client) askMap(ctx context.Context, addr string) (*gridpb.ClusterMapResponse, error) {
	n, err := c.nodes.get(addr)
	if err != nil {
		return nil, err
	}
	var m *gridpb.ClusterMapResponse
	err = c.call(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
		defer cancel()
		var err error
		m, err = n.rpc.ClusterMap(ctx, &gridpb.ClusterMapRequest{})
		return err
	})
	switch {
	case err == nil:
		return m, nil
	case status.Code(err) == codes.Unimplemented:
		return &gridpb.ClusterMapResponse{Standalone: true}, nil
	case status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil:
		return nil, fmt.Errorf("%w: no cluster map from %s within %v", ErrUnavailable, addr, fetchTimeout)
	}
	return nil, err
}

// leaderWait is the pause after the n-th Redirect that named no leader: the
// retry policy's backoff, but at least minLeaderWait, so that a policy
// without backoff does not spend its redirects in a burst, and for the
// first electionPolls at most maxLeaderPoll (jittered), so that the
// client hears of a new leader soon after its election.
func (c *Client) leaderWait(n int) time.Duration {
	d := c.cfg.retry.backoff(n)
	if n <= electionPolls {
		d = min(d, jitter(maxLeaderPoll))
	}
	return max(d, minLeaderWait)
}

// nodeErr is the error of a node that could not be opened: the client is
// closed, or the grid named an address gRPC cannot parse.
func nodeErr(addr string, err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: node address %q: %w", errProtocol, addr, err)
}

// tooManyRedirects is the error of a send that was still redirected after
// maxRedirects redirects (last is the last refusal): leadership moves, the
// nodes' maps disagree, or no node asked can serve. It is retried like any
// Unavailable answer; nothing was applied.
func tooManyRedirects(last error) error {
	rd := redirectOf(last)
	return fmt.Errorf("%w: shard %d: still redirected after %d redirects (last to leader %q at %q, map epoch %d: %v)",
		ErrUnavailable, rd.GetShard(), maxRedirects, rd.GetLeaderId(), rd.GetLeaderAddr(), rd.GetEpoch(), last)
}

// ClusterMap returns the cluster map as a node holds it, from the first of
// the known nodes and the seeds that answers. A standalone node, or one
// older than clustering, answers with Standalone set and nothing else. The
// answer also refreshes the client's routing unless it is older than the
// map the client holds.
func (c *Client) ClusterMap(ctx context.Context) (ClusterMap, error) {
	var m *gridpb.ClusterMapResponse
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		m, err = c.r.fetchMap(ctx, true)
		return err
	})
	if err != nil {
		return ClusterMap{}, err
	}
	return clusterMapFromPB(m), nil
}
