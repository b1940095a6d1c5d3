package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Changes of a group's membership. The cluster runtime moves a replica to a
// node by adding it as a non-voter, waiting until it has caught up (its
// applied index reaches the leader's commit index), promoting it with
// AddVoter, and then removing the replica it replaces (handing leadership
// over first when that is the leader).
//
// The changes run on the group's leader: elsewhere they fail with
// ErrNotLeader. Each reports success only once the change is committed, or
// fails when ctx ends (with ErrOutcomeUnknown: the change may still be
// committed; read Configuration). A change the leader's latest
// configuration already shows (a retry after an outcome unknown) is not
// made again: the call waits until that configuration is committed, by a
// barrier entry this leader commits after it, so a retry never reports a
// change the group may still lose. They are safe to call concurrently with
// proposals, which Raft orders with them in the log; Raft runs one change
// at a time and queues the others.

// AddNonvoter adds server id (a node id) at addr (its Raft, that is Mux,
// address) to the group as a non-voter: it receives the log but neither
// votes nor counts toward commitment, so a new replica catches up without
// weakening the quorum. For a member it only updates the address: a voter
// stays a voter.
func (s *Replica) AddNonvoter(ctx context.Context, id, addr string) error {
	what := "add non-voter " + id
	if srv, ok, err := s.latestServer(what, id); err != nil {
		return err
	} else if ok && srv.Address == raft.ServerAddress(addr) {
		return s.ensureCommitted(ctx, what)
	}
	return s.changeConfig(ctx, what, func(timeout time.Duration) raft.IndexFuture {
		return s.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
}

// AddVoter adds server id at addr to the group as a voter, or promotes it
// if it is a non-voter. A voter counts toward the quorum at once: add it as
// a non-voter first and let it catch up.
func (s *Replica) AddVoter(ctx context.Context, id, addr string) error {
	what := "add voter " + id
	if srv, ok, err := s.latestServer(what, id); err != nil {
		return err
	} else if ok && srv.Suffrage == raft.Voter && srv.Address == raft.ServerAddress(addr) {
		return s.ensureCommitted(ctx, what)
	}
	return s.changeConfig(ctx, what, func(timeout time.Duration) raft.IndexFuture {
		return s.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
}

// RemoveServer removes server id from the group. For an id the leader's
// latest configuration does not list it succeeds once that configuration
// is committed: the id is then out of the group for good. A leader that
// removes itself steps down once the change is committed; hand leadership
// over first instead (TransferLeadership), so the group has no election to
// wait for.
func (s *Replica) RemoveServer(ctx context.Context, id string) error {
	what := "remove server " + id
	if _, ok, err := s.latestServer(what, id); err != nil {
		return err
	} else if !ok {
		return s.ensureCommitted(ctx, what)
	}
	return s.changeConfig(ctx, what, func(timeout time.Duration) raft.IndexFuture {
		return s.raft.RemoveServer(raft.ServerID(id), 0, timeout)
	})
}

// latestServer returns server id of this leader's latest configuration,
// committed or not; ok is false when it lists none.
func (s *Replica) latestServer(what, id string) (srv raft.Server, ok bool, err error) {
	if err := s.checkLeader(what); err != nil {
		return raft.Server{}, false, err
	}
	servers, err := s.Configuration()
	if err != nil {
		return raft.Server{}, false, err
	}
	srv, ok = findServer(servers, id)
	return srv, ok, nil
}

// ensureCommitted returns once this leader's latest configuration is
// committed: it commits a barrier entry, which commits only after every
// entry before it, the configuration's included. A leader cut off from its
// quorum cannot: ctx ends with ErrOutcomeUnknown, or the leader steps down
// (ErrOutcomeUnknown, or ErrNotLeader before the barrier is enqueued).
func (s *Replica) ensureCommitted(ctx context.Context, what string) error {
	if err := s.checkLeader(what); err != nil {
		return err
	}
	timeout := enqueueTimeout(ctx)
	return s.await(ctx, what+" (the latest configuration shows it: waiting for its commit)", func() error {
		return s.raft.Barrier(timeout).Error()
	})
}

// TransferLeadership hands the group's leadership to voter id at addr (an
// empty addr: its address in the configuration), or with id "" to the
// voter Raft finds most up to date, and waits until this replica no longer
// leads, or ctx ends. A transfer to this replica itself does nothing. While
// it runs, proposals fail with ErrNotLeader. A target that is not a voter,
// or with id "" a group without another voter, fails with ErrNotVoter.
func (s *Replica) TransferLeadership(ctx context.Context, id, addr string) error {
	what := "transfer leadership"
	if id != "" {
		what += " to " + id
	}
	if err := s.checkLeader(what); err != nil {
		return err
	}
	if id == s.cfg.NodeID {
		return nil
	}
	servers, err := s.Configuration()
	if err != nil {
		return err
	}
	if id == "" {
		other := func(srv raft.Server) bool { return srv.Suffrage == raft.Voter && string(srv.ID) != s.cfg.NodeID }
		if !slices.ContainsFunc(servers, other) {
			return fmt.Errorf("shard %d: %s: the group has no other voter: %w", s.cfg.ID, what, ErrNotVoter)
		}
	} else {
		srv, ok := findServer(servers, id)
		if !ok || srv.Suffrage != raft.Voter {
			return fmt.Errorf("shard %d: %s: %w", s.cfg.ID, what, ErrNotVoter)
		}
		if addr == "" {
			addr = string(srv.Address)
		}
	}
	err = s.await(ctx, what, func() error {
		if id == "" {
			return s.raft.LeadershipTransfer().Error()
		}
		return s.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr)).Error()
	})
	if err != nil {
		return err
	}
	// Raft answers once this replica has left its leader loop; wait for
	// the state to say so too, so that IsLeader agrees on return.
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.raft.State() == raft.Leader {
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard %d: %s: %w: %w", s.cfg.ID, what, ErrOutcomeUnknown, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Configuration returns the servers of the latest group configuration this
// replica knows (on the leader it may not be committed yet). A replica that
// has not joined a group yet returns none.
func (s *Replica) Configuration() ([]raft.Server, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("shard %d: configuration: %w", s.cfg.ID, adminError(err))
	}
	cf := f.Configuration()
	return cf.Clone().Servers, nil
}

// Leader returns the node id and Raft address of the group's leader as
// this replica knows it, or "" for both when it knows none.
func (s *Replica) Leader() (id, addr string) {
	a, i := s.raft.LeaderWithID()
	return string(i), string(a)
}

// CommitIndex is the index of the latest log entry this replica knows to
// be committed. A new replica has caught up with the leader when its
// applied index (Status) reaches the leader's commit index.
func (s *Replica) CommitIndex() uint64 { return s.raft.CommitIndex() }

func findServer(servers []raft.Server, id string) (raft.Server, bool) {
	for _, srv := range servers {
		if string(srv.ID) == id {
			return srv, true
		}
	}
	return raft.Server{}, false
}

// checkLeader fails fast on a closed replica and one that does not lead.
func (s *Replica) checkLeader(what string) error {
	select {
	case <-s.quit:
		return fmt.Errorf("shard %d: %s: %w", s.cfg.ID, what, ErrClosed)
	default:
	}
	if s.raft.State() != raft.Leader {
		return fmt.Errorf("shard %d: %s: %w", s.cfg.ID, what, ErrNotLeader)
	}
	return nil
}

// changeConfig runs a configuration change on the leader and waits for it
// to commit. Raft bounds only the wait to enqueue the change, by ctx's
// deadline.
func (s *Replica) changeConfig(ctx context.Context, what string, change func(timeout time.Duration) raft.IndexFuture) error {
	if err := s.checkLeader(what); err != nil {
		return err
	}
	timeout := enqueueTimeout(ctx)
	return s.await(ctx, what, func() error { return change(timeout).Error() })
}

// enqueueTimeout bounds the wait to hand an entry to Raft by ctx's
// deadline (0: none).
func enqueueTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 0
}

// await runs op, which blocks on a Raft future, until it returns or ctx
// ends or the replica closes. Raft futures cannot be cancelled: op goes on
// in its goroutine until Raft answers it, which Raft does at the latest
// when it shuts down.
func (s *Replica) await(ctx context.Context, what string, op func() error) error {
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("shard %d: %s: %w", s.cfg.ID, what, adminError(err))
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shard %d: %s: %w: %w", s.cfg.ID, what, ErrOutcomeUnknown, ctx.Err())
	case <-s.quit:
		return fmt.Errorf("shard %d: %s: %w", s.cfg.ID, what, ErrClosed)
	}
}

// adminError maps Raft's errors for membership changes to the shard's
// sentinels. Unlike a proposal, a change that was never enqueued was not
// made: its enqueue timeout is the caller's deadline.
func adminError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}
