package shard

import (
	"bufio"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/tiering"
)

// fsm is the thin Raft adapter: it decodes committed entries, hands them to
// the keyspace Machine, flushes what the machine wrote to the cold tier and
// returns the results. Nothing else happens here.
//
// mu guards m and the cold tier's pending writes: Apply takes it for writing
// once per batch and flushes the cold tier before releasing it, so stale
// reads and status, which take it for reading, never see a pending batch.
type fsm struct {
	mu   sync.RWMutex
	m    *keyspace.Machine
	cold *tiering.Shard // nil: no cold tier
	// coldFiles is the directory of the files snapshots carry
	// (raftlog.Snapshots.FilesDir): the cold tier's sstables of each, one
	// folder per snapshot id.
	coldFiles string

	// snapshotPause is how long the last Snapshot held the apply loop (ns).
	snapshotPause atomic.Int64
	// conf is the latest group configuration this replica has applied (so
	// it is committed), from a configuration entry or a restored
	// snapshot's metadata (snapConf, called after each Restore); nil
	// before any. Raft 1.7.2 does not expose a configuration's index.
	conf     atomic.Pointer[appliedConfig]
	snapConf func() (uint64, raft.Configuration, bool)

	// applied is the index of the last entry ApplyBatch was given (Raft
	// hands the FSM commands and configurations only), 0 after a Restore
	// until the next batch; guarded by mu.
	applied uint64
	// applying is the time spent applying entries since the replica
	// opened or last restored a snapshot (ns), snapped its value at the
	// last Snapshot: the difference is about what a restart would spend
	// replaying (tail). persisted is how long the last snapshot took to
	// write (ns).
	applying, snapped, persisted atomic.Int64
}

// appliedConfig is a committed group configuration and its log index.
type appliedConfig struct {
	index   uint64
	servers []raft.Server
}

// noteConfig records configuration c at index unless a later one is known.
func (f *fsm) noteConfig(index uint64, c raft.Configuration) {
	next := &appliedConfig{index: index, servers: c.Clone().Servers}
	for {
		cur := f.conf.Load()
		if cur != nil && cur.index >= index {
			return
		}
		if f.conf.CompareAndSwap(cur, next) {
			return
		}
	}
}

// config returns the latest applied configuration (nil before any).
func (f *fsm) config() *appliedConfig { return f.conf.Load() }

var (
	_ raft.BatchingFSM = (*fsm)(nil)
	_ raft.FSMSnapshot = (*fsmSnapshot)(nil)
)

func newFSM(cold *tiering.Shard, coldFiles string) *fsm {
	f := &fsm{m: keyspace.NewMachine(), cold: cold, coldFiles: coldFiles}
	if cold != nil {
		f.m.UseCold(cold)
	}
	return f
}

// ApplyBatch applies committed entries in order. A committed command entry
// that does not decode means this binary cannot reproduce the replicated
// state: it panics rather than diverge from the other replicas.
func (f *fsm) ApplyBatch(logs []*raft.Log) []interface{} {
	began := time.Now() // decoding included: a replay decodes too
	out := make([]interface{}, len(logs))
	entries := make([]keyspace.Entry, len(logs))
	for i, l := range logs {
		if l.Type == raft.LogConfiguration {
			f.noteConfig(l.Index, raft.DecodeConfiguration(l.Data))
		}
		if l.Type != raft.LogCommand {
			continue
		}
		e, err := keyspace.DecodeEntry(l.Data)
		if err != nil {
			panic(fmt.Sprintf("shard: committed entry %d does not decode: %v", l.Index, err))
		}
		entries[i] = e
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(logs) > 0 {
		f.applied = logs[len(logs)-1].Index
	}
	// The times are for the stage metrics and the tail only; the state
	// never sees them.
	start := time.Now()
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			out[i] = &applied{results: f.m.Apply(l.Index, &entries[i], make([]keyspace.Result, 0, len(entries[i].Commands))),
				appended: l.AppendedAt, applyStart: start}
		}
	}
	if f.cold != nil {
		// Flush retries a failed write until it succeeds (the tier reports
		// the error meanwhile): the state must not move on without it. It
		// fails only when the node is closing.
		if err := f.cold.Flush(); err != nil {
			panic(fmt.Sprintf("shard: cold tier write failed while closing: %v", err))
		}
	}
	end := time.Now()
	f.applying.Add(int64(end.Sub(began)))
	for _, a := range out {
		if a, ok := a.(*applied); ok {
			a.applyEnd = end
		}
	}
	return out
}

func (f *fsm) Apply(l *raft.Log) interface{} { return f.ApplyBatch([]*raft.Log{l})[0] }

// applied carries an entry's results to its proposer, who takes them. Raft's
// log cache keeps recent apply futures alive (it points into them), and with
// them their responses: taking the results out lets them go as soon as the
// callers are done, instead of a cache's worth of result arrays per shard.
//
// It also carries when the entry passed the stages of its apply, for the
// leader's stage metrics (Metrics.Stages): when the leader appended it to
// its log (raft.Log.AppendedAt) and when the FSM began and finished the
// batch of entries it came in.
type applied struct {
	results                        []keyspace.Result
	appended, applyStart, applyEnd time.Time
}

func (a *applied) take() []keyspace.Result {
	r := a.results
	a.results = nil
	return r
}

// Snapshot captures the machine copy-on-write and the cold tier as a Pebble
// snapshot, both O(1) in the records held; writing happens in Persist,
// concurrently with later applies.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	start := time.Now()
	f.mu.Lock()
	defer func() {
		f.mu.Unlock()
		f.snapshotPause.Store(int64(time.Since(start)))
	}()
	s := &fsmSnapshot{snap: f.m.Snapshot(), files: f.coldFiles, persisted: &f.persisted}
	if f.cold != nil {
		s.cold = f.cold.Snapshot()
	}
	f.snapped.Store(f.applying.Load())
	return s, nil
}

// tail is the time spent applying the entries since the last snapshot
// taken or restored (or since the replica opened, before either): about
// what a restart would spend replaying them.
func (f *fsm) tail() time.Duration { return time.Duration(f.applying.Load() - f.snapped.Load()) }

// lastPersist is how long the last snapshot took to write; 0 before one.
func (f *fsm) lastPersist() time.Duration { return time.Duration(f.persisted.Load()) }

// Restore builds a fresh machine from the snapshot, loads the cold tier's
// part of it (from the local files of the snapshot when this node wrote
// them and they are intact, leaving the rest of rc unread: Raft's file
// snapshot store verifies the whole file when it opens it, and Close only
// closes it), then swaps the machine in.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReaderSize(rc, keyspace.SnapshotBufferSize)
	m, err := keyspace.ReadSnapshot(br)
	if err != nil {
		return fmt.Errorf("shard: restore: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cold != nil {
		if err := f.cold.RestoreWithFiles(br, f.coldFiles); err != nil {
			return fmt.Errorf("shard: restore cold tier: %w", err)
		}
		m.UseCold(f.cold)
	}
	f.m, f.applied = m, 0
	f.applying.Store(0)
	f.snapped.Store(0)
	if f.snapConf != nil {
		if index, c, ok := f.snapConf(); ok {
			f.noteConfig(index, c)
		}
	}
	return nil
}

// checksum returns the machine's checksum, the index of the entry it was
// taken after (0: none since a restore) and the cold tier's key count then.
func (f *fsm) checksum() (c keyspace.Checksum, index uint64, coldKeys int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.cold != nil {
		coldKeys = f.cold.Stats().Keys
	}
	return f.m.Checksum(), f.applied, coldKeys
}

// view runs fn on the machine under the read lock.
func (f *fsm) view(fn func(m *keyspace.Machine)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.m)
}

// fsmSnapshot is the hot machine's snapshot followed, when the shard has a
// cold tier, by the cold tier's, whose records Persist also keeps as local
// sstables among the snapshot's files (files/<snapshot id>) for a fast
// restart. The snapshot store prunes the files of the snapshots it reaps.
type fsmSnapshot struct {
	snap      *keyspace.Snapshot
	cold      *tiering.ShardSnapshot
	files     string
	persisted *atomic.Int64 // fsm.persisted, set once written
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	defer func() { s.persisted.Store(int64(time.Since(start))) }()
	_, err := s.snap.WriteTo(sink)
	if err == nil && s.cold != nil {
		_, err = s.cold.WriteWithFiles(sink, s.files, sink.ID())
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("shard: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {
	s.snap.Release()
	if s.cold != nil {
		s.cold.Close()
	}
}
