package api

import (
	"github.com/prometheus/client_golang/prometheus"
)

// clusterCollector exports what the alert rules need of the cluster
// runtime: this node's standing in the control group and the replica count
// the map asks of every shard (deploy/prometheus). A standalone node
// exports nothing of it.
type clusterCollector struct {
	view                     ClusterView
	controlLeader, controlIn *prometheus.Desc
	replicas, nodes          *prometheus.Desc
}

func newClusterCollector(view ClusterView) *clusterCollector {
	return &clusterCollector{
		view: view,
		controlLeader: prometheus.NewDesc("l4xg_grid_control_leader",
			"1 when this node leads the control group (the cluster map's Raft group).", nil, nil),
		controlIn: prometheus.NewDesc("l4xg_grid_control_voter",
			"1 when this node is a voter of the control group and knows a leader.", nil, nil),
		replicas: prometheus.NewDesc("l4xg_grid_cluster_replicas",
			"The replica count of every shard in the cluster map (0 before bootstrap).", nil, nil),
		nodes: prometheus.NewDesc("l4xg_grid_cluster_nodes",
			"Nodes in this node's cluster map, by state (active, draining, removed) and whether gossip sees them alive.", []string{"state", "alive"}, nil),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.controlLeader
	ch <- c.controlIn
	ch <- c.replicas
	ch <- c.nodes
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	state := c.view.ControlState()
	ch <- prometheus.MustNewConstMetric(c.controlLeader, prometheus.GaugeValue, boolValue(state == "leader"))
	ch <- prometheus.MustNewConstMetric(c.controlIn, prometheus.GaugeValue,
		boolValue((state == "leader" || state == "follower") && c.view.ControlLeader() != ""))
	m := c.view.Map()
	if m == nil {
		ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(m.Replicas))
	alive := c.view.Alive()
	counts := map[[2]string]int{}
	for _, n := range m.Nodes {
		a := "false"
		if alive[n.ID] {
			a = "true"
		}
		counts[[2]string{n.State.String(), a}]++
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(v), k[0], k[1])
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
