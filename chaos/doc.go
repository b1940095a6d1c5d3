// Package chaos checks that the grid is linearizable under faults: clients
// run random concurrent operations on a few keys while nodes are killed and
// restarted, every call and answer is recorded, and the history is checked
// with porcupine (github.com/anishathalye/porcupine) against a model of the
// grid's per-key register (DESIGN.md sections 2 and 3).
//
// # The model
//
// Model is one Register per key: the history is partitioned by Input.Key
// and each partition checked alone, so a history of thousands of operations
// on a handful of keys checks in milliseconds. A Register is the record of
// DESIGN.md section 2 (state ABSENT, PROCESSING, COMPLETED, FAILED or
// POISONED; token, attempts, max_attempts, deadline, stored result) and
// transitions implements the Reserve, Complete, Fail, Extend, Release, Get
// and Forget tables the way keyspace does; each answer is checked in full
// (outcome, state, token, attempt, deadline, result), so an acknowledged
// Extend whose new deadline a later Get does not show is caught as surely as
// a lost Complete.
//
// The model is nondeterministic where the grid may choose: a new lease's
// token is whatever the grid picked, as long as it is above every token the
// key had before (fencing tokens strictly increase, across restarts and,
// later, leader changes). The Register keeps that floor; a grant below it is
// illegal. porcupine.NondeterministicModel's power-set construction turns it
// into a porcupine.Model. CheckTokens checks the same rule apart from the
// model, over grants ordered in real time, and names the two operations when
// it breaks. Zero durations and max_attempts mean the grid's defaults, as on
// the wire (a Fail without retry_after backs off by attempt).
//
// Time: the grid evaluates each write at the stamp its leader put in the log
// entry, which every answer carries (client.Result.Now). The model uses that
// stamp: deadlines are exact (now + lease, now + retention), a lease past its
// deadline is taken over by the next Reserve (attempt + 1, or POISONED at
// max_attempts), a settled record past its retention reads ABSENT. Writes of
// one key are applied in log order with non-decreasing stamps, so an answer
// whose stamp is below an earlier write's is illegal. (Reads are not held to
// that: a ReadIndex read may be stamped by the leader's clock ahead of a
// write that follows it.) The test runs the workload twice: with hour-long
// leases, day-long retentions and hour-long retry delays that nothing
// outlives (TestLinearizableUnderRestarts), and with a fake grid clock that
// the workers push forward and leases of 100 ms to 1 s
// (TestLinearizableWithExpiry), where takeovers, retries after a delay and
// the end of retention all happen.
//
// # Unknown outcomes
//
// A call that timed out or whose connection was cut after it was sent (the
// client's "outcome unknown" and ErrUnavailable errors) may or may not have
// taken effect, now or later. Recorder.Unknown records it with an open end
// (Return = math.MaxInt64) and Output.Unknown; the model accepts it as no
// transition at all or as any transition the operation could make, at any
// stamp between the key's last write stamp and Input.Horizon (the largest
// stamp answered in the history: an operation applied later is observed by
// nobody, and porcupine may linearize it last). What such an operation
// decided and nobody saw (the token of a grant, a deadline from an unknown
// stamp) is kept as unknown in the Register and pinned by the first answer
// that shows it. A Get with an unknown outcome changed nothing and is left
// out of the history.
//
// Each recorded operation must be sent at most once. The client resends a
// call that found the grid unavailable; a resent Reserve whose first send
// was granted answers BUSY on its own lease, one operation making two
// transitions. The test's clients therefore run with RetryPolicy{Attempts:
// 1} and wait for the connection (grpc.WaitForReady) instead of failing
// while a node restarts. A porcupine result of Unknown (the search timed
// out) fails the test: it is not a pass.
//
// When a history is not linearizable, Check writes porcupine's visualization
// (an HTML file: one partition per key, the longest linearizable prefix, the
// operation where it breaks) and the test logs its path; -chaos.viz DIR
// keeps it after the test (otherwise it is in the test's temp dir).
//
// # It can fail
//
// TestCheckerCatchesBrokenGrid runs the same workload against a real node
// behind a deliberately broken layer and expects porcupine to answer
// Illegal: "stale-gets" answers Get from a cache that writes never
// invalidate (what a follower read without ReadIndex looks like from
// outside), "lost-completes" acknowledges Complete with the answer a real one
// would give without sending it (a leader that answers before its entry
// commits). TestModelRejects holds hand-written histories the model must
// reject: two ACQUIRED on a key with no settle or expiry between, a
// DUPLICATE before any Complete, a token going backwards (also past an
// unknown grant), ABSENT after an acknowledged Complete, a lost Extend, an
// expired lease not taken over, a BUSY that shows the holder's token, write
// stamps going backwards.
//
// # Running
//
//	go test -race ./chaos/                        # CI: one seed, 8 workers, 5 keys, 1,500 operations, 3 faults (about 10 s)
//	go test ./chaos -long -run Lin -v             # 5 seeds, 16 workers, 20 keys, 20,000 operations, 12 faults each, and the kill -9 test (about 2.5 min)
//	go test ./chaos -run Kill9 -chaos.proc -v     # the kill -9 test alone: builds gridnode, 3 seeds of 10,000 operations and 10 faults (about 40 s)
//	go test ./chaos -run Lin -chaos.seed N -v     # replay the workload choices of a logged seed
//	go test ./chaos -run Broken -chaos.viz /tmp/v # keep the visualizations of the broken runs
//
// TestLinearizableUnderKill9 runs gridnode serve processes (fsync'd Raft
// log) and kills them with SIGKILL; every other seed runs them with a hot
// window of 200 ms, so that duplicates and Gets are answered from the cold
// tier across the kills too (the test fails if none is).
//
// A seed fixes the workers' choices, not the interleaving: a failure is
// reproduced by the history it printed, not by rerunning the seed.
//
// # Clusters
//
// The test drives a Cluster: the client addresses of its nodes, Kill (cut
// every connection at once) and Restart (same data, same address). A
// single in-process node over internal/gridtest implements it now (its Kill
// cuts connections but still closes the shards cleanly), and so does a
// gridnode process whose Kill is SIGKILL (proc_test.go). The in-process cluster harness of issue 3
// implements Cluster, and Partitioner (Partition, Heal), which the test is
// to use when present; the workload then picks a node per fault (the leader
// of a key's shard, or any) and clients dial every node through the cluster
// client, which routes and redirects. The model needs nothing new for a
// cluster: stamps and tokens are per shard and a key lives on one shard.
// What the cluster client adds is resending after redirects and failovers:
// it must either resend only calls it knows were not applied, or report
// the outcome as unknown, for the recorded history to stay one transition
// per operation.
package chaos
