package shard

import (
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/l4xg/grid/keyspace"
)

// Metrics are the Prometheus collectors fed by the shards of a node. They are
// created per node and registered on the registry the caller passes: no
// package-level state.
type Metrics struct {
	Outcomes      *prometheus.CounterVec
	Duplicates    prometheus.Counter
	LeasesExpired prometheus.Counter
	Poisoned      prometheus.Counter
	Forgotten     prometheus.Counter
	EntryCommands prometheus.Histogram
	ApplyLatency  prometheus.Histogram
	LeaderChanges prometheus.Counter
	// LeaseRefusals counts requests carrying a Reserve or an Extend that
	// a leader refused under the clock rules, by rule; LeaseWaits the
	// entries that waited for the leader's clock to reach the stamps.
	LeaseRefusals *prometheus.CounterVec
	LeaseWaits    prometheus.Counter
	// Stages times the way of requests through their shard's leader, by
	// stage (the Stage* names), so that a reader can see which stage holds
	// the time.
	Stages *prometheus.HistogramVec
	// Replication times each AppendEntries that carried entries from a
	// shard leader on this node to a follower, by the follower's node:
	// the network both ways and the follower's log write.
	Replication *prometheus.HistogramVec
}

// The stages of Metrics.Stages, in the order a request passes them.
const (
	// StageQueue: from a request's arrival at the proposer until the
	// entry carrying it is handed to Raft (waiting for an entry slot,
	// gathering, stamping, encoding). Observed per request.
	StageQueue = "propose_queue"
	// StageDispatch: from raft.Apply until the leader appended the entry
	// (Raft's apply queue and leader loop).
	StageDispatch = "raft_dispatch"
	// StageCommit: from the leader's append until the FSM begins the
	// entry: the leader's log write, replication to a quorum and the
	// followers' writes, the commit, and the FSM's queue.
	StageCommit = "raft_commit"
	// StageApply: the FSM applying the batch of entries that held it.
	StageApply = "fsm_apply"
	// StageAnswer: from the FSM's end until the callers are answered.
	StageAnswer = "answer"
)

// NewMetrics creates the collectors and registers them on reg (may be nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "l4xg_grid_outcomes_total",
			Help: "Applied operations by operation and outcome.",
		}, []string{"op", "outcome"}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "l4xg_grid_duplicates_suppressed_total",
			Help: "Reserves answered DUPLICATE: messages whose processing was suppressed.",
		}),
		LeasesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "l4xg_grid_leases_expired_total",
			Help: "Expired processing leases taken over by a new reserve (crashed or stalled holders).",
		}),
		Poisoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "l4xg_grid_poisoned_total",
			Help: "Records that became POISONED.",
		}),
		Forgotten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "l4xg_grid_forgotten_total",
			Help: "Records removed by Forget.",
		}),
		EntryCommands: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "l4xg_grid_raft_entry_commands",
			Help:    "Commands per Raft log entry (group commit batch size).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		ApplyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "l4xg_grid_raft_apply_latency_seconds",
			Help:    "Time from proposing an entry to its results being applied.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		LeaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "l4xg_grid_leader_changes_total",
			Help: "Leadership changes observed by local shard replicas.",
		}),
		LeaseRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "l4xg_grid_clock_lease_refusals_total",
			Help: "Requests carrying a Reserve or an Extend refused by a leader under the clock rules, by rule: behind_stamps (its clock is behind the shard's stamps by more than the maximum offset) or peer_offset (its node is outside the maximum offset of its peers).",
		}, []string{"rule"}),
		LeaseWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "l4xg_grid_clock_lease_waits_total",
			Help: "Log entries granting leases that waited for the leader's clock to reach the shard's stamps (a new leader whose clock is slightly behind the previous one's).",
		}),
		Stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "l4xg_grid_stage_seconds",
			Help:    "Time of requests in each stage of their shard's leader: propose_queue (per request), raft_dispatch, raft_commit, fsm_apply, answer (per entry).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16),
		}, []string{"stage"}),
		Replication: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "l4xg_grid_raft_replication_seconds",
			Help:    "Round trip of each AppendEntries carrying entries from a shard leader on this node to a follower, by the follower's node id: the network both ways and the follower's log write.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16),
		}, []string{"peer"}),
	}
	if reg != nil {
		reg.MustRegister(m.Outcomes, m.Duplicates, m.LeasesExpired, m.Poisoned, m.Forgotten,
			m.EntryCommands, m.ApplyLatency, m.LeaderChanges, m.LeaseRefusals, m.LeaseWaits, m.Stages, m.Replication)
	}
	return m
}

// observeReplication is raftlog.TransportConfig.OnReplicate for the
// shards of a node.
func (m *Metrics) observeReplication(peer raft.ServerID, _ int, took time.Duration) {
	m.Replication.WithLabelValues(string(peer)).Observe(took.Seconds())
}

// observeEntry is called by the proposer on the leader for each applied entry.
func (m *Metrics) observeEntry(commands int, took time.Duration, res []keyspace.Result, cmds []keyspace.Command) {
	if commands == 0 {
		return // a tick
	}
	m.EntryCommands.Observe(float64(commands))
	m.ApplyLatency.Observe(took.Seconds())
	for i := range res {
		r, c := &res[i], &cmds[i]
		m.Outcomes.WithLabelValues(c.Op.String(), r.Outcome.String()).Inc()
		switch {
		case r.Outcome == keyspace.OutcomeDuplicate:
			m.Duplicates.Inc()
		case r.Outcome == keyspace.OutcomePoisoned && r.TookOver,
			c.Op == keyspace.OpFail && r.Outcome == keyspace.OutcomeOK && r.State == keyspace.Poisoned && !r.Repeated:
			m.Poisoned.Inc()
		case c.Op == keyspace.OpForget && r.Existed:
			m.Forgotten.Inc()
		}
		if r.LeaseExpired {
			m.LeasesExpired.Inc()
		}
	}
}

// observeStages is called by the proposer on the leader for each applied
// entry b, whose FSM answer is a, once its callers were answered.
func (m *Metrics) observeStages(b *batch, a *applied, answered time.Time) {
	if len(b.cmds) == 0 || a == nil || a.applyStart.IsZero() {
		return // a tick, or an entry without its times
	}
	queue := m.Stages.WithLabelValues(StageQueue)
	for _, r := range b.reqs {
		queue.Observe(b.proposed.Sub(r.start).Seconds())
	}
	// AppendedAt is the leader's append time; a zero one (an entry this
	// leader did not append) leaves the two stages around it out.
	if !a.appended.IsZero() {
		m.Stages.WithLabelValues(StageDispatch).Observe(a.appended.Sub(b.proposed).Seconds())
		m.Stages.WithLabelValues(StageCommit).Observe(a.applyStart.Sub(a.appended).Seconds())
	}
	m.Stages.WithLabelValues(StageApply).Observe(a.applyEnd.Sub(a.applyStart).Seconds())
	m.Stages.WithLabelValues(StageAnswer).Observe(answered.Sub(a.applyEnd).Seconds())
}
