package shard

import (
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Pebble and raft keep a few process-wide workers.
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2/internal/cache.(*shard).releaseLoop"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*InmemTransport).Close"),
	)
}

// openStandalone opens a host with cfg and starts a replica of every shard,
// each a one-voter group (or resuming its state), in parallel, as a
// standalone node does.
func openStandalone(cfg HostConfig) (*Host, error) {
	h, err := OpenHost(cfg)
	if err != nil {
		return nil, err
	}
	errs := make([]error, h.Settings().Shards)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.StartReplica(i, true)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = h.Close()
		return nil, err
	}
	return h, nil
}

// fsmApplied is the index of the last entry s's state machine has applied.
// raft.AppliedIndex counts the entries handed to the FSM, which may still
// be applying them: a test that reads the state after waiting on it can
// read it before the entry. ApplyBatch holds the FSM's lock from setting
// the index until the batch is applied, so this index never runs ahead.
// After a Restore, until the next batch, the FSM holds no index (0) and
// raft's, set once the restore is done, is the one.
func fsmApplied(s *Replica) uint64 {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	if s.fsm.applied == 0 {
		return s.raft.AppliedIndex()
	}
	return s.fsm.applied
}
