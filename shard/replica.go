package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/tiering"
)

// Config describes one shard replica. Zero values take defaults where noted.
type Config struct {
	ID     uint64
	NodeID string
	// SnapshotDir holds this node's snapshot stores (one folder per shard).
	SnapshotDir string
	Logs        *raftlog.Journal
	// Transport and Address reach the shard's peers. Nil means a single-node
	// group on an in-memory transport.
	Transport raft.Transport
	// Stopping, if set, reports whether the node is stopping on purpose
	// (raftlog.Mux.Stopping); while it does, Raft's complaints about
	// reaching the peers are logged at info (raftlog.RaftLogger).
	Stopping func() bool
	// Bootstrap a new group when the logs hold no state: with Peers as its
	// voters, or this node alone when Peers is empty.
	Bootstrap bool
	Peers     []raft.Server
	// Cold is the shard's cold tier; nil keeps every record hot. It is
	// wiped at Open and rebuilt from the snapshot and the log.
	Cold *tiering.Shard
	// HotWindow is how long settled records stay hot; default 24 h.
	HotWindow time.Duration
	// HotMaxBytes is the shard's hot tier budget; 0 means none.
	HotMaxBytes int64
	// Tokens is the layout of the fencing tokens the shard grants
	// (digest.TokenLayout), derived from the shard id and the grid's
	// shard count, a hard setting (digest.NewTokenLayout). The leader
	// writes it into every entry it proposes, so the log says how each
	// entry's tokens are made. The zero layout names no shard; with bits
	// its Shard must be ID.
	Tokens digest.TokenLayout
	// Clock is the leader's time source for stamps; default time.Now.
	Clock func() time.Time
	// MaxClockOffset is the bound on the offset between any two nodes'
	// clocks that leases rely on (doc.go, Time); default
	// digest.DefaultMaxClockOffset, range 1 ms .. MaxMaxClockOffset.
	MaxClockOffset time.Duration
	// PeerClocks, if set, tells whether this node's clock is within
	// MaxClockOffset of its peers'; nil: no peer measurement (a node
	// outside a cluster), only the shard's own stamps are checked.
	PeerClocks PeerClocks
	// DiskFull, if set, is nil while this node's disk has room for new
	// keys and says why not otherwise (an error wrapping ErrDiskFull: the
	// host's disk guard). A leader on a node without room hands its
	// leadership to a voter whose node has room (handOverForDisk), as
	// PeerDisks tells; nil: the disk is not watched.
	DiskFull  func() error
	PeerDisks PeerDisks
	// TickInterval is how often the leader stamps an idle shard; default 1s.
	TickInterval time.Duration
	// MaxEntryCommands bounds commands per log entry; default 4096.
	MaxEntryCommands int
	// MaxInflight bounds entries on their way through Raft; default 1.
	// Measured on one node with an fsync'd log (BenchmarkPropose, 50
	// callers): one entry in flight, carrying everything queued meanwhile,
	// beat 2 and 4 by 20-40%: hashicorp/raft stores one batch per fsync
	// anyway, and fewer, larger entries cost less to apply and answer.
	// 1..MaxInflightLimit (ValidateMaxInflight).
	MaxInflight int
	// SnapshotTail is how long the replica may spend applying entries
	// after its last snapshot before it takes another (or as long as the
	// last snapshot took to write, if longer); default
	// DefaultSnapshotTail. It bounds what a restart replays (boundTail).
	SnapshotTail time.Duration
	// Raft timeouts; defaults suit a single node on loopback.
	HeartbeatTimeout time.Duration
	Logger           *slog.Logger
	Metrics          *Metrics

	// tuneRaft, if set, adjusts Raft's configuration last (tests: few
	// trailing logs, so that a lagging follower needs a snapshot).
	tuneRaft func(*raft.Config)
}

// withDefaults is c with every unset field at its default: the one place
// the defaults of a replica's config are.
func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.TickInterval <= 0 {
		c.TickInterval = time.Second
	}
	if c.MaxClockOffset == 0 {
		c.MaxClockOffset = digest.DefaultMaxClockOffset
	}
	if c.HotWindow <= 0 {
		c.HotWindow = keyspace.DefaultHotWindow * time.Millisecond
	}
	if c.MaxEntryCommands <= 0 || c.MaxEntryCommands > keyspace.MaxEntryCommands {
		c.MaxEntryCommands = 4096
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 1
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = 500 * time.Millisecond
	}
	if c.SnapshotTail == 0 {
		c.SnapshotTail = DefaultSnapshotTail
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports whether c, with its defaults, can open a replica.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.NodeID == "":
		return errors.New("shard: config: NodeID is required")
	case c.Logs == nil:
		return errors.New("shard: config: Logs is required")
	case c.SnapshotDir == "":
		return errors.New("shard: config: SnapshotDir is required")
	case c.HotMaxBytes < 0:
		return errors.New("shard: config: HotMaxBytes must not be negative")
	}
	if err := ValidateMaxClockOffset(c.MaxClockOffset); err != nil {
		return fmt.Errorf("shard: config: %w", err)
	}
	if err := ValidateMaxInflight(c.MaxInflight); err != nil {
		return fmt.Errorf("shard: config: %w", err)
	}
	if err := c.Tokens.Validate(); err != nil {
		return fmt.Errorf("shard: config: %w", err)
	}
	if c.Tokens.Bits > 0 && uint64(c.Tokens.Shard) != c.ID {
		return fmt.Errorf("shard: config: the token layout names shard %d, this is shard %d", c.Tokens.Shard, c.ID)
	}
	return nil
}

// MaxInflightLimit bounds Config.MaxInflight: past a few entries in
// flight a shard gains nothing (raft replicates one AppendEntries at a
// time per follower) and its entries only get smaller.
const MaxInflightLimit = 16

// ValidateMaxInflight checks an entries-in-flight setting: 0 (the
// default) or 1..MaxInflightLimit.
func ValidateMaxInflight(n int) error {
	if n < 0 || n > MaxInflightLimit {
		return fmt.Errorf("shard: entries in flight %d out of range 1..%d (0: the default)", n, MaxInflightLimit)
	}
	return nil
}

// Replica is one replica of one Raft group: the FSM, the proposer and the
// leader's tick. Propose and Get are safe for concurrent use.
type Replica struct {
	cfg   Config
	raft  *raft.Raft
	fsm   *fsm
	prop  *proposer
	store *raftlog.JournalGroup
	logs  raft.LogStore // the log through Raft's cache: store

	// readyTerm is the term whose first entry (a barrier) this replica has
	// applied as leader: only then is it reported ready.
	readyTerm atomic.Uint64
	// diskNudge wakes the leader loop when the node refused a new key for
	// its full disk (DiskRefused); capacity 1.
	diskNudge chan struct{}
	quit      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// raftLogger is the replica's Raft logger (its Raft and snapshot store):
// the node's logger, at warn, quiet about peers while the node stops
// (Config.Stopping).
func raftLogger(cfg Config) hclog.Logger {
	return raftlog.RaftLogger(cfg.Logger, "raft", cfg.Stopping).With("shard", cfg.ID)
}

// Open starts the replica.
func Open(cfg Config) (*Replica, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Cold != nil {
		// The cold tier is derived state: Raft restores the snapshot and
		// replays the log into an empty one.
		if err := cfg.Cold.Wipe(); err != nil {
			return nil, fmt.Errorf("shard %d: %w", cfg.ID, err)
		}
	}
	snaps, err := raftlog.OpenSnapshots(cfg.SnapshotDir, cfg.ID, 2, raftLogger(cfg))
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", cfg.ID, err)
	}
	// The cold tier keeps its records of each snapshot as sstables among
	// the snapshot's files, so that a restart links them in instead of
	// rewriting them from the snapshot stream; the store prunes them.
	s := &Replica{cfg: cfg, fsm: newFSM(cfg.Cold, snaps.FilesDir()), store: cfg.Logs.Group(cfg.ID), diskNudge: make(chan struct{}, 1), quit: make(chan struct{})}
	s.fsm.snapConf = func() (uint64, raft.Configuration, bool) { return latestSnapshotConfig(snaps) }
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	raftlog.SetTimeouts(rc, cfg.HeartbeatTimeout)
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.Logger = raftLogger(cfg)
	rc.NoSnapshotRestoreOnStart = false
	// A leader that commits its own removal steps down instead of shutting
	// Raft down under the Replica: the host stops the replica (StopReplica).
	rc.ShutdownOnRemove = false
	if cfg.tuneRaft != nil {
		cfg.tuneRaft(rc)
	}

	if err := raftlog.TrimLogBehindSnapshot(s.store, snaps); err != nil {
		return nil, fmt.Errorf("shard %d: %w", cfg.ID, err)
	}
	// The cache serves recent entries to followers without a journal read;
	// it holds whole entries (up to MaxEntryCommands commands each), so it
	// is kept small: logCacheEntries.
	logs, err := raft.NewLogCache(logCacheEntries, s.store)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", cfg.ID, err)
	}
	s.logs = logs
	trans := cfg.Transport
	if trans == nil {
		_, trans = raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("%s/shard-%d", cfg.NodeID, cfg.ID)))
	}
	if cfg.Bootstrap {
		has, err := raft.HasExistingState(logs, s.store, snaps)
		if err != nil {
			return nil, fmt.Errorf("shard %d: %w", cfg.ID, err)
		}
		if !has {
			boot := raft.Configuration{Servers: cfg.Peers}
			if len(boot.Servers) == 0 {
				boot.Servers = []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}}
			}
			if err := raft.BootstrapCluster(rc, logs, s.store, snaps, trans, boot); err != nil {
				return nil, fmt.Errorf("shard %d: bootstrap: %w", cfg.ID, err)
			}
		}
	}
	start := time.Now()
	r, err := raft.NewRaft(rc, s.fsm, logs, s.store, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("shard %d: %w", cfg.ID, err)
	}
	cfg.Logger.Info("shard started", "shard", cfg.ID, "applied_index", r.AppliedIndex(),
		"last_index", r.LastIndex(), "took", time.Since(start))
	s.raft = r
	policy := keyspace.TierPolicy{HotWindow: cfg.HotWindow.Milliseconds(), HotMaxBytes: cfg.HotMaxBytes}
	rules := clockRules{shard: cfg.ID, maxOffset: cfg.MaxClockOffset, peers: cfg.PeerClocks, metrics: cfg.Metrics}
	s.prop = newProposer(r, cfg.Clock, s.appliedStamp, policy, rules, cfg.MaxEntryCommands, cfg.MaxInflight)
	s.prop.layout = cfg.Tokens
	if cfg.Metrics != nil {
		s.prop.observe = cfg.Metrics.observeEntry
		s.prop.stages = cfg.Metrics.observeStages
	}
	s.wg.Add(1)
	go s.lead()
	if last := r.LastIndex(); last-r.AppliedIndex() >= rc.SnapshotThreshold {
		s.wg.Add(1)
		go s.compactAfterReplay(last)
	}
	s.wg.Add(1)
	go s.boundTail()
	return s, nil
}

// DefaultSnapshotTail is Config.SnapshotTail's default. A restart from a
// snapshot of 10 M hot keys took 4-6 s on the 2-core test machine, so 2 s
// of replay keeps it within docs/design.md section 8's 10 s.
const DefaultSnapshotTail = 2 * time.Second

// tailPoll is how often boundTail looks at the tail.
const tailPoll = time.Second

// boundTail snapshots whenever the replica has spent SnapshotTail applying
// entries since its last snapshot, or as long as the last snapshot took
// to write if that is longer: a crash then leaves about that much replay
// (a replay costs what the applies cost), and the snapshots cost at most
// about what the applies they save from replay did.
//
// Raft's own snapshots come two to four minutes after a start (a random
// time between one and two SnapshotIntervals) once SnapshotThreshold
// entries are in the log: they count neither the work in the entries nor
// the load. One node under the bench's load (28k reserves/s, 20 commands
// an entry) wrote 275k entries in 195 s without a snapshot, and its
// restart took 17 s, 15 of them replaying. And what a command costs to
// replay varies fivefold: 2.7 µs with every key hot, 14 µs once the hot
// tier is at its budget (each new key demotes another), so neither a
// count of entries nor of commands bounds the time.
func (s *Replica) boundTail() {
	defer s.wg.Done()
	t := time.NewTicker(tailPoll)
	defer t.Stop()
	// After a failed snapshot (a full disk) the next try waits, twice as
	// long after each failure, up to a minute.
	var wait time.Duration
	var next time.Time
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		tail := s.fsm.tail()
		if tail < max(s.cfg.SnapshotTail, s.fsm.lastPersist()) || time.Now().Before(next) {
			continue
		}
		start := time.Now()
		if err := s.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			wait = min(max(2*wait, tailPoll), time.Minute)
			next = time.Now().Add(wait)
			s.cfg.Logger.Warn("snapshot of a long tail", "shard", s.cfg.ID, "apply_time", tail, "err", err, "retry_in", wait)
			continue
		}
		wait = 0
		s.cfg.Logger.Info("snapshot of a long tail", "shard", s.cfg.ID, "apply_time", tail, "took", time.Since(start))
	}
}

// replayPoll is how often compactAfterReplay looks at the applied index.
const replayPoll = 100 * time.Millisecond

// compactAfterReplay snapshots once the replica has applied the log it
// found at start (up to last). Raft's own snapshots come at a random time
// between one and two SnapshotIntervals (2-4 min) after start, so a node
// restarted more often than that never snapshots: each restart replays
// the whole log since the cluster began (540k entries a shard, 7 s, late
// in a 10-minute chaos run), and its log is never trimmed. Started only
// when the tail is at least raft's SnapshotThreshold.
func (s *Replica) compactAfterReplay(last uint64) {
	defer s.wg.Done()
	t := time.NewTicker(replayPoll)
	defer t.Stop()
	// Raft's applied index counts the entries handed to the FSM, which
	// may still be applying thousands of them: a snapshot now would be
	// taken at the FSM's index. Once nothing waits for the FSM, the
	// snapshot request queues behind the last batch.
	for s.raft.AppliedIndex() < last || s.raft.Stats()["fsm_pending"] != "0" {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
	}
	start := time.Now()
	if err := s.raft.Snapshot().Error(); err != nil {
		s.cfg.Logger.Warn("snapshot after replay", "shard", s.cfg.ID, "err", err)
		return
	}
	s.cfg.Logger.Info("snapshot after replay", "shard", s.cfg.ID, "replayed_to", last, "took", time.Since(start))
}

// ID is the shard id.
func (s *Replica) ID() uint64 { return s.cfg.ID }

func (s *Replica) appliedStamp() int64 {
	var now int64
	s.fsm.view(func(m *keyspace.Machine) { now = m.Now() })
	return now
}

// Propose applies commands through the log and returns one result each, in
// order. Commands must be valid (the API validates them).
func (s *Replica) Propose(ctx context.Context, cmds []keyspace.Command) ([]keyspace.Result, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	return s.prop.propose(ctx, cmds, false)
}

// ReadOptions say how Read reads.
type ReadOptions struct {
	// StaleOK lets this replica answer from its applied state, at its
	// latest stamp, instead of a linearizable read.
	StaleOK bool
	// ShowToken asks for the operator view, which includes the record's
	// token (see keyspace.Machine.Get): without it the answer has none.
	ShowToken bool
}

// Read reads the record of d. Unless o.StaleOK it is linearizable: the read
// travels through the log as a read-only command, group-committed with the
// writes, and is evaluated at its entry's stamp, exactly in log order. With
// o.StaleOK this replica answers from its applied state, at its latest stamp.
func (s *Replica) Read(ctx context.Context, d digest.Digest, o ReadOptions) (keyspace.Result, error) {
	if o.StaleOK {
		var res keyspace.Result
		s.fsm.view(func(m *keyspace.Machine) { res = m.Get(d, 0, o.ShowToken) })
		return res, nil
	}
	res, err := s.prop.propose(ctx, []keyspace.Command{{Op: keyspace.OpGet, Digest: d, ShowToken: o.ShowToken}}, false)
	if err != nil {
		return keyspace.Result{}, err
	}
	return res[0], nil
}

// Get is Read without the operator view: the answer carries no token.
func (s *Replica) Get(ctx context.Context, d digest.Digest, staleOK bool) (keyspace.Result, error) {
	return s.Read(ctx, d, ReadOptions{StaleOK: staleOK})
}

// IsLeader reports whether this replica leads its group and serves: it has
// applied the first entry of its term, so reads and writes go through it.
func (s *Replica) IsLeader() bool { return s.ready() }

// ready reports whether this replica leads and has applied its term's barrier.
func (s *Replica) ready() bool {
	if s.raft.State() != raft.Leader {
		return false
	}
	term, _ := s.currentTerm()
	return term != 0 && s.readyTerm.Load() == term
}

func (s *Replica) currentTerm() (uint64, error) {
	return s.store.GetUint64([]byte("CurrentTerm"))
}

// lead watches leadership: on gaining it, apply a barrier before serving
// reads; while leading, send a tick entry every TickInterval so stamped time
// moves forward and expired records are reclaimed on an idle shard (a shard
// holding no record skips its ticks). A leader that may not grant leases
// (clockRefusal) sends no tick, whose stamp would carry nothing forward
// (or, from a clock outside the bound, carry the shard's time off with
// it), and at every tick tries to hand its leadership over to a voter
// that can. A leader whose node's disk is below its reserve (DiskFull),
// where it refuses new keys, hands its leadership to a voter with room
// (handOverForDisk): right after its barrier when elected so, as soon as
// its node refuses one of the shard's new keys (DiskRefused), and at
// every tick; it keeps the leadership while no voter has room.
func (s *Replica) lead() {
	defer s.wg.Done()
	ticker := time.NewTicker(s.cfg.TickInterval)
	defer ticker.Stop()
	leaderCh := s.raft.LeaderCh()
	var lastNudged time.Time
	for {
		select {
		case <-s.quit:
			return
		case isLeader := <-leaderCh:
			if s.cfg.Metrics != nil {
				s.cfg.Metrics.LeaderChanges.Inc()
			}
			if !isLeader {
				s.readyTerm.Store(0)
				continue
			}
			term, _ := s.currentTerm()
			if err := s.raft.Barrier(0).Error(); err != nil {
				s.cfg.Logger.Warn("barrier after election failed", "shard", s.cfg.ID, "err", err)
				continue
			}
			s.readyTerm.Store(term)
			// A leader elected on a full disk (an election after its
			// leader failed, while it was full) hands over at once rather
			// than refuse the shard's new keys for a tick: only to a
			// voter not known to be full, so this moves no leadership
			// back and forth.
			if s.diskHandOver() {
				continue
			}
			// A new leader checks its clock a full tick after its
			// barrier, so that leaderships move at most once a tick when
			// no voter can grant (no majority of clocks agrees).
			ticker.Reset(s.cfg.TickInterval)
		case <-s.diskNudge:
			// The node just refused a new key of this shard for its full
			// disk: hand over now rather than at the next tick. At most
			// one try per tenth of a tick, however many are refused.
			if s.raft.State() == raft.Leader && time.Since(lastNudged) >= s.cfg.TickInterval/10 {
				lastNudged = time.Now()
				s.diskHandOver()
			}
		case <-ticker.C:
			if s.raft.State() != raft.Leader {
				continue
			}
			if rule, why := s.clockRefusal(); why != nil {
				s.handOverForClock(rule, why)
				continue
			}
			if s.diskHandOver() {
				continue
			}
			if s.empty() {
				continue // an empty shard has nothing to expire: no fsync for it
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TickInterval)
			_, err := s.prop.propose(ctx, nil, true)
			cancel()
			if err != nil && !errors.Is(err, ErrClosed) {
				s.cfg.Logger.Debug("tick failed", "shard", s.cfg.ID, "err", err)
			}
			// Each tick demotes a bounded number of records: over the hot
			// budget, tick ten times as often until demotion catches up.
			if s.overBudget() {
				ticker.Reset(s.cfg.TickInterval / 10)
			} else {
				ticker.Reset(s.cfg.TickInterval)
			}
		}
	}
}

func (s *Replica) overBudget() bool {
	over := false
	s.fsm.view(func(m *keyspace.Machine) { over = m.OverBudget() })
	return over
}

// empty reports whether the shard holds no record in either tier.
func (s *Replica) empty() bool {
	n := 0
	s.fsm.view(func(m *keyspace.Machine) { n = m.Len() })
	return n == 0 && (s.cfg.Cold == nil || s.cfg.Cold.Stats().Keys == 0)
}

// WaitReady blocks until this replica leads and serves reads, or ctx ends.
func (s *Replica) WaitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard %d not ready: %w", s.cfg.ID, ctx.Err())
		case <-s.quit:
			return ErrClosed
		case <-t.C:
		}
	}
	return nil
}

// Status is a point-in-time description of the replica.
type Status struct {
	ID           uint64
	RaftState    string
	Leader       string
	Keys         int
	HotBytes     int
	Counts       map[keyspace.State]int64
	AppliedIndex uint64
	CommitIndex  uint64
	LastIndex    uint64
	Term         uint64
	Stamp        int64
	Stats        keyspace.Stats
	Policy       keyspace.TierPolicy
	Cold         tiering.ShardStats // zero without a cold tier
	// SnapshotPause is how long the last snapshot held the apply loop.
	SnapshotPause time.Duration
	// The group as this replica knows it (see GroupView).
	GroupView
}

// Status describes the replica.
func (s *Replica) Status() Status {
	st := Status{
		ID:          s.cfg.ID,
		RaftState:   s.raft.State().String(),
		CommitIndex: s.raft.CommitIndex(),
		LastIndex:   s.raft.LastIndex(),
		Counts:      make(map[keyspace.State]int64, 4),
	}
	_, id := s.raft.LeaderWithID()
	st.Leader = string(id)
	st.Term, _ = s.currentTerm()
	st.AppliedIndex = s.raft.AppliedIndex()
	s.fsm.view(func(m *keyspace.Machine) {
		st.Keys, st.HotBytes, st.Stamp, st.Stats, st.Policy = m.Len(), m.HotBytes(), m.Now(), m.Stats(), m.Policy()
		for _, state := range []keyspace.State{keyspace.Processing, keyspace.Completed, keyspace.Failed, keyspace.Poisoned} {
			st.Counts[state] = m.Count(state)
		}
	})
	if s.cfg.Cold != nil {
		st.Cold = s.cfg.Cold.Stats()
	}
	st.SnapshotPause = time.Duration(s.fsm.snapshotPause.Load())
	st.GroupView = s.groupView(st.CommitIndex)
	return st
}

// Checksum is a replica's state checksum (keyspace.Machine.Checksum) and
// where in the log it was taken.
type Checksum struct {
	keyspace.Checksum
	// Index is the log index of the last entry applied when it was taken;
	// 0 when no entry was applied since the replica restored a snapshot.
	// Replicas of a group that report the same Index must report the same
	// checksum.
	Index uint64
	// ColdKeys is the cold tier's key count, which the checksum leaves out.
	ColdKeys int64
}

// Checksum takes the replica's checksum. It holds the apply loop while it
// reads every hot record: for checks (the chaos tool's, an operator's), not
// for polling.
func (s *Replica) Checksum() Checksum {
	var c Checksum
	c.Checksum, c.Index, c.ColdKeys = s.fsm.checksum()
	return c
}

// Snapshot asks Raft for a snapshot now (operators, tests).
func (s *Replica) Snapshot() error { return s.raft.Snapshot().Error() }

// Close stops the replica. Pending proposals fail with ErrClosed. A leader
// of a group with other voters hands leadership over first.
func (s *Replica) Close() error { return s.close(true) }

// close stops the replica, handing leadership over first if handOver. A
// replica removed from its group closes without: the group no longer
// counts on it, and its state is about to be deleted.
func (s *Replica) close(handOver bool) error {
	var err error
	s.closeOnce.Do(func() {
		close(s.quit)
		s.wg.Wait()
		s.prop.close()
		if handOver {
			s.handOver()
		}
		err = s.raft.Shutdown().Error()
	})
	return err
}

// handOver transfers leadership to another voter, if this replica leads one
// that has others, so that stopping a node (a rolling restart) costs its
// shards a hand-over instead of an election timeout. Raft picks the voter
// most caught up, unless some of them may not lead well (fitVoters: a
// full disk, a clock outside the bound) and others may: then the first of
// those. It is best effort: a transfer that fails or takes long leaves the
// others to elect.
func (s *Replica) handOver() {
	if s.raft.State() != raft.Leader {
		return
	}
	fit, others := s.fitVoters()
	if others == 0 {
		return
	}
	transfer := s.raft.LeadershipTransfer
	if len(fit) > 0 && len(fit) < others {
		transfer = func() raft.Future { return s.raft.LeadershipTransferToServer(fit[0].ID, fit[0].Address) }
	}
	done := make(chan error, 1)
	go func() { done <- transfer().Error() }()
	select {
	case err := <-done:
		if err != nil {
			s.cfg.Logger.Info("leadership transfer at close failed", "shard", s.cfg.ID, "err", err)
		}
	case <-time.After(2 * s.cfg.HeartbeatTimeout):
		s.cfg.Logger.Info("leadership transfer at close timed out", "shard", s.cfg.ID)
	}
}

// logCacheEntries is the recent entries each replica keeps in memory for
// replication. A follower is normally an entry or two behind, so a few
// dozen serve it; a lagging one reads the journal. Its entries are the
// leader's encoded buffers: with 256, a standalone grid loading 10 M keys
// held 26 MB in them, 2.6 B a key of the heap (BenchmarkTieredNode).
const logCacheEntries = 64
