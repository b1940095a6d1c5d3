package shard

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/l4xg/grid/keyspace"
)

// hostCollector reports per-shard gauges at scrape time.
type hostCollector struct {
	h        *Host
	keys     *prometheus.Desc
	bytes    *prometheus.Desc
	applied  *prometheus.Desc
	isLeader *prometheus.Desc
}

func newHostCollector(h *Host) *hostCollector {
	return &hostCollector{
		h:        h,
		keys:     prometheus.NewDesc("l4xg_grid_keys", "Records held, by shard, tier and state.", []string{"shard", "tier", "state"}, nil),
		bytes:    prometheus.NewDesc("l4xg_grid_tier_bytes", "Bytes held by the record slots of a tier, by shard.", []string{"shard", "tier"}, nil),
		applied:  prometheus.NewDesc("l4xg_grid_raft_applied_index", "Last Raft index applied, by shard.", []string{"shard"}, nil),
		isLeader: prometheus.NewDesc("l4xg_grid_shard_leader", "1 when the local replica leads the shard.", []string{"shard"}, nil),
	}
}

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.bytes
	ch <- c.applied
	ch <- c.isLeader
}

func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.h.shards {
		st := s.Status()
		id := strconv.FormatUint(st.ID, 10)
		for state, n := range st.Counts {
			ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(n), id, "hot", stateLabel(state))
		}
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.HotBytes), id, "hot")
		ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(st.AppliedIndex), id)
		leader := 0.0
		if st.RaftState == "Leader" {
			leader = 1
		}
		ch <- prometheus.MustNewConstMetric(c.isLeader, prometheus.GaugeValue, leader, id)
	}
}

func stateLabel(s keyspace.State) string {
	switch s {
	case keyspace.Processing:
		return "processing"
	case keyspace.Completed:
		return "completed"
	case keyspace.Failed:
		return "failed"
	default:
		return "poisoned"
	}
}
