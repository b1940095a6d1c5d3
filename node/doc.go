// Package node wires one grid process: the client gRPC listener, the HTTP
// port, the Prometheus registry, the shard host and, in a cluster, the Raft
// mux and the cluster runtime, with the api package's gRPC service over
// them. It decides nothing itself: each part's rules live in its own
// package; node owns only their order of start and stop and what is handed
// to whom.
//
// A standalone node (Config.Cluster nil) opens its host and starts a
// replica of every shard, each a one-voter group on an in-memory
// transport, in parallel (a restart is as long as the largest shard's
// restore); it is ready when every shard leads and serves. A cluster node
// opens the Raft mux that carries all its groups (DefaultRaftListen), its
// clock offset measurement, its host with no replica, and the cluster
// runtime, which starts and stops the replicas the cluster map gives it;
// it is ready when cluster.Runtime.Ready says so. The API server gets the
// cluster runtime as its api.ClusterView and the api.Peers pool, which is
// also the cluster.Remote the control leader moves replicas with.
//
// One registry per node collects the Go and process metrics, the shards'
// and the API server's (RPCs, clock); the HTTP port serves it on /metrics, with /healthz (the process is up),
// /readyz (the node is ready and its cold tier writes succeed) and, with
// Config.Pprof, /debug/pprof/. The gRPC health service follows readiness.
//
// Every port closes a connection that has not said what it is within
// HandshakeTimeout: the HTTP/2 preface and settings on the gRPC port, the
// request headers on the HTTP port, the mux header on the Raft port.
//
// Stop drains in-flight RPCs, then, in a cluster, leaves gossip and hands
// the control group's leadership over, then closes the shards (each
// leader hands its group over first), the peer connections and the mux.
package node
