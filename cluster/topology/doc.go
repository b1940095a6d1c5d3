// Package topology is the cluster's state, apart from the runtime that
// keeps it (package cluster): the Map (nodes with their addresses, state
// and incarnation; every shard's replica set, generation and leader hint;
// the epoch), the control commands and their canonical encoding, Apply
// (the map after one command, or a rejection that changes nothing), the
// placement planner (Plan and PlanGroups for shard replicas, PlanControl
// for the control group's own voters) with the moves it plans, InitialSets
// for a new cluster, Grace (when a down node counts as dead) and NodeMeta,
// what a node gossips about itself. It also holds what nodes ask and tell
// each other about the state (peer.go: shard admin requests and their
// Fence, a replica's status, a drain's progress, a clock report, and the
// errors they answer with), so that the API speaks to the runtime through
// interfaces of its own and imports only this package of the cluster.
//
// Everything here is deterministic: no clock (times are arguments), no
// I/O, no Raft, no gossip. Every control voter that applies the same
// commands holds the same map, and the planner is tested as data
// (testdata/plan, testdata/control).
package topology
