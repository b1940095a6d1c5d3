package shard

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/l4xg/grid/internal/testwait"
	"github.com/l4xg/grid/keyspace"
)

// TestMoveAReplicaAcrossHosts: a shard created on host 0 alone grows to
// hosts 1 and 2 (each added as a non-voter, caught up, then promoted), hands
// its leadership to host 1, which removes host 0; host 0 purges its replica.
// The record written on host 0 alone is still served by a linearizable read
// on the new leader, and a new write commits on hosts 1 and 2 only. A
// follower refuses every membership change with ErrNotLeader.
func TestMoveAReplicaAcrossHosts(t *testing.T) {
	nh := openEmptyHosts(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(i int, bootstrap bool) *Replica {
		t.Helper()
		s, err := nh.hosts[i].StartReplica(0, bootstrap)
		if err != nil {
			t.Fatalf("host %d: start replica: %v", i, err)
		}
		return s
	}
	id := func(i int) string { return string(nh.peers[i].ID) }

	r0 := start(0, true)
	testwait.For(t, 20*time.Second, "host 0 to lead the new group", r0.IsLeader)
	first := propose(t, r0, reserve("order-1", time.Hour))[0]
	if first.Outcome != keyspace.OutcomeAcquired {
		t.Fatalf("reserve on host 0 alone: %v", first.Outcome)
	}

	joined := []*Replica{r0}
	for _, i := range []int{1, 2} {
		r := start(i, false)
		if again := start(i, false); again != r {
			t.Fatalf("host %d: a second StartReplica returned another replica", i)
		}
		if err := r0.AddNonvoter(ctx, id(i), nh.addrs[i]); err != nil {
			t.Fatalf("add non-voter %s: %v", id(i), err)
		}
		commit := r0.CommitIndex()
		testwait.For(t, 20*time.Second, "the non-voter to catch up", func() bool { return r.Status().AppliedIndex >= commit })
		if err := r0.AddVoter(ctx, id(i), nh.addrs[i]); err != nil {
			t.Fatalf("add voter %s: %v", id(i), err)
		}
		joined = append(joined, r)
	}
	wantVoters(t, r0, id(0), id(1), id(2))
	r1, r2 := joined[1], joined[2]

	// A follower refuses every change, and knows the configuration.
	commit := r0.CommitIndex()
	testwait.For(t, 20*time.Second, "host 2 to apply its promotion and know its leader", func() bool {
		l, _ := r2.Leader()
		return l == id(0) && r2.Status().AppliedIndex >= commit
	})
	for name, err := range map[string]error{
		"add non-voter":       r2.AddNonvoter(ctx, "x", "127.0.0.1:1"),
		"add voter":           r2.AddVoter(ctx, "x", "127.0.0.1:1"),
		"remove server":       r2.RemoveServer(ctx, id(0)),
		"transfer leadership": r2.TransferLeadership(ctx, "", ""),
	} {
		if !errorsIs(err, ErrNotLeader) {
			t.Errorf("%s on a follower: %v, want ErrNotLeader", name, err)
		}
	}
	wantVoters(t, r2, id(0), id(1), id(2))
	if err := r0.TransferLeadership(ctx, "nobody", ""); !errorsIs(err, ErrNotVoter) {
		t.Fatalf("transfer to a server outside the group: %v, want ErrNotVoter", err)
	}

	// Host 1 takes over and removes host 0, which purges its replica.
	if err := r0.TransferLeadership(ctx, id(1), nh.addrs[1]); err != nil {
		t.Fatalf("transfer leadership to %s: %v", id(1), err)
	}
	if r0.IsLeader() {
		t.Fatal("host 0 still leads after the transfer")
	}
	testwait.For(t, 20*time.Second, "host 1 to lead", r1.IsLeader)
	if _, err := r0.Propose(ctx, []keyspace.Command{reserve("late", time.Hour)}); !errorsIs(err, ErrNotLeader) {
		t.Fatalf("proposal to the old leader: %v, want ErrNotLeader", err)
	}
	if err := r1.RemoveServer(ctx, id(0)); err != nil {
		t.Fatalf("remove %s: %v", id(0), err)
	}
	if err := r1.RemoveServer(ctx, id(0)); err != nil {
		t.Fatalf("remove %s again (no longer a member): %v", id(0), err)
	}
	wantVoters(t, r1, id(1), id(2))
	if err := nh.hosts[0].StopReplica(0, true); err != nil {
		t.Fatal(err)
	}
	if nh.hosts[0].Replica(0) != nil {
		t.Fatal("host 0 still hosts shard 0 after StopReplica")
	}

	got, err := r1.Read(ctx, reserve("order-1", 0).Digest, ReadOptions{ShowToken: true})
	if err != nil || got.State != keyspace.Processing || got.Token != first.Token {
		t.Fatalf("linearizable read on the new leader: %+v, %v; want the lease granted on host 0", got, err)
	}
	next := propose(t, r1, reserve("order-2", time.Hour))[0]
	if next.Outcome != keyspace.OutcomeAcquired {
		t.Fatalf("write on hosts 1 and 2: %v", next.Outcome)
	}
	testwait.For(t, 20*time.Second, "host 2 to apply the write", func() bool {
		res, _ := r2.Get(ctx, reserve("order-2", 0).Digest, true)
		return res.State == keyspace.Processing
	})
}

// wantVoters checks that s's configuration is exactly these voters.
func wantVoters(t *testing.T, s *Replica, ids ...string) {
	t.Helper()
	servers, err := s.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	var voters []string
	for _, srv := range servers {
		if srv.Suffrage != raft.Voter {
			t.Fatalf("configuration %+v: %s is not a voter", servers, srv.ID)
		}
		voters = append(voters, string(srv.ID))
	}
	slices.Sort(voters)
	if !slices.Equal(voters, ids) {
		t.Fatalf("voters %v, want %v", voters, ids)
	}
}
