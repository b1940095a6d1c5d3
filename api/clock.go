package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/shard"
)

// The node's clock as Status and /metrics show it: its offset to its peers
// (cluster.ClockOffsets, measured over gossip; none on a standalone node),
// the bound, and whether the node is inside it: clock_ok is false when
// more than half of the peers it knows are measured beyond the bound, and the node then
// grants no lease (shard doc.go, Clocks and leases). A shard whose stamps
// are ahead of its leader's clock by more than the bound grants no lease
// either, whoever's clock made them: Status shows each shard's stamp and
// the node's clock (gridnode status names such shards), and
// l4xg_grid_clock_shards_behind_stamps counts them; the peers, not the
// stamps, tell whose clock is off, so that does not make clock_ok false.
//
// /readyz does not go false for the clock: readiness means caught up
// (docs/cluster.md, Readiness), it gates rolling restarts and load
// balancers, and a node outside the clock bound is still a caught-up voter
// that serves settles, reads and forwards, refuses only lease grants (with a
// Redirect, so that clients go to the new leader) and hands its leaderships
// over. Marking it not ready would stall a readiness-gated rolling restart
// that may be the very fix, and an outage of the time service on every node
// would turn into a cluster reporting nothing ready although it still
// settles. The alerts are l4xg_grid_clock_outside_bound and
// l4xg_grid_clock_shards_behind_stamps; status shows clock_ok.

// ClockReporter is the node's clock as measured against its peers
// (cluster.ClockOffsets on a clustered node).
type ClockReporter interface {
	Report() topology.ClockReport
}

// clockStatus fills the clock fields of a Status answer.
func clockStatus(host *shard.Host, offsets ClockReporter, resp *gridpb.StatusResponse) {
	resp.MaxClockOffsetMs = host.MaxClockOffset().Milliseconds()
	resp.ClockOk = true
	if offsets != nil {
		r := offsets.Report()
		resp.ClockOffsetMs, resp.ClockOk = r.Offset.Milliseconds(), r.OK
	}
}

// clockCollector reports the node's clock at scrape time.
type clockCollector struct {
	host                                                   *shard.Host
	offsets                                                ClockReporter // nil on a standalone node
	offset, max, outside, behind, peers, peer, uncertainty *prometheus.Desc
}

func newClockCollector(host *shard.Host, offsets ClockReporter) *clockCollector {
	return &clockCollector{
		host: host, offsets: offsets,
		offset: prometheus.NewDesc("l4xg_grid_clock_offset_seconds",
			"This node's clock offset to its peers: the median of their recent estimates (peer clock minus this node's; positive: the peers are ahead). 0 with no peer measured.", nil, nil),
		max: prometheus.NewDesc("l4xg_grid_clock_max_offset_seconds",
			"The maximum clock offset leases rely on (--max-clock-offset).", nil, nil),
		outside: prometheus.NewDesc("l4xg_grid_clock_outside_bound",
			"1 while this node's clock is outside the maximum offset of more than half of its peers, as recently measured: it grants no lease.", nil, nil),
		behind: prometheus.NewDesc("l4xg_grid_clock_shards_behind_stamps",
			"Shards this node leads whose stamps are ahead of its clock by more than the maximum offset: they grant no lease until its clock gets there or the leadership moves.", nil, nil),
		peers: prometheus.NewDesc("l4xg_grid_clock_peers_measured",
			"Peers with a recent clock offset estimate.", nil, nil),
		peer: prometheus.NewDesc("l4xg_grid_clock_peer_offset_seconds",
			"The latest estimate of a peer's clock minus this node's, by peer.", []string{"peer"}, nil),
		uncertainty: prometheus.NewDesc("l4xg_grid_clock_peer_uncertainty_seconds",
			"The uncertainty of that estimate (half the gossip ping's round trip), by peer.", []string{"peer"}, nil),
	}
}

func (c *clockCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.offset, c.max, c.outside, c.behind, c.peers, c.peer, c.uncertainty} {
		ch <- d
	}
}

func (c *clockCollector) Collect(ch chan<- prometheus.Metric) {
	var st gridpb.StatusResponse
	clockStatus(c.host, c.offsets, &st)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	outside := 0.0
	if !st.ClockOk {
		outside = 1
	}
	gauge(c.max, c.host.MaxClockOffset().Seconds())
	gauge(c.outside, outside)
	gauge(c.behind, float64(len(c.host.ShardsBehindStamps())))
	var r topology.ClockReport
	if c.offsets != nil {
		r = c.offsets.Report()
	}
	gauge(c.offset, r.Offset.Seconds())
	gauge(c.peers, float64(len(r.Peers)))
	for _, p := range r.Peers {
		gauge(c.peer, p.Offset.Seconds(), string(p.ID))
		gauge(c.uncertainty, p.Uncertainty.Seconds(), string(p.ID))
	}
}
