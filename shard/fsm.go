package shard

import (
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/keyspace"
)

// fsm is the thin Raft adapter: it decodes committed entries, hands them to
// the keyspace Machine and returns the results. Nothing else happens here.
//
// mu guards m: Apply takes it for writing once per batch; stale reads and
// status take it for reading.
type fsm struct {
	mu sync.RWMutex
	m  *keyspace.Machine
}

var (
	_ raft.BatchingFSM = (*fsm)(nil)
	_ raft.FSMSnapshot = (*fsmSnapshot)(nil)
)

func newFSM() *fsm {
	return &fsm{m: keyspace.NewMachine()}
}

// ApplyBatch applies committed entries in order. A committed command entry
// that does not decode means this binary cannot reproduce the replicated
// state: it panics rather than diverge from the other replicas.
func (f *fsm) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	entries := make([]keyspace.Entry, len(logs))
	for i, l := range logs {
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
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			out[i] = f.m.Apply(l.Index, &entries[i], make([]keyspace.Result, 0, len(entries[i].Commands)))
		}
	}
	f.mu.Unlock()
	return out
}

func (f *fsm) Apply(l *raft.Log) interface{} { return f.ApplyBatch([]*raft.Log{l})[0] }

// Snapshot captures the machine copy-on-write; writing happens in Persist,
// concurrently with later applies.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &fsmSnapshot{snap: f.m.Snapshot()}, nil
}

// Restore builds a fresh machine from the snapshot, then swaps it in.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m, err := keyspace.ReadSnapshot(rc)
	if err != nil {
		return fmt.Errorf("shard: restore: %w", err)
	}
	f.mu.Lock()
	f.m = m
	f.mu.Unlock()
	return nil
}

// view runs fn on the machine under the read lock.
func (f *fsm) view(fn func(m *keyspace.Machine)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.m)
}

type fsmSnapshot struct{ snap *keyspace.Snapshot }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.snap.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("shard: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() { s.snap.Release() }
