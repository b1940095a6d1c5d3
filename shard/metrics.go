package shard

import (
	"time"

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
}

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
	}
	if reg != nil {
		reg.MustRegister(m.Outcomes, m.Duplicates, m.LeasesExpired, m.Poisoned, m.Forgotten,
			m.EntryCommands, m.ApplyLatency, m.LeaderChanges, m.LeaseRefusals, m.LeaseWaits)
	}
	return m
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
