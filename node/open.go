package node

import (
	"crypto/tls"
	"errors"
	"path/filepath"
	"sync"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/raftlog"
	"github.com/l4xg/grid/shard"
)

// openStandalone opens the host, starts a replica of every shard, each a
// one-voter group on an in-memory transport, and the API server over them.
func (n *Node) openStandalone(opts api.Options) error {
	host, err := shard.OpenHost(n.cfg.Host)
	if err != nil {
		return err
	}
	if err := startEveryShard(host); err != nil {
		_ = host.Close()
		return err
	}
	n.host = host
	opts.Clock = host.Clock
	n.server = api.NewServer(host, opts)
	return nil
}

// startEveryShard starts host's replica of every shard, creating its group
// on first start. The replicas restore their snapshots in parallel: a
// restart is as long as the largest shard's restore, not the sum of all.
func startEveryShard(host *shard.Host) error {
	errs := make([]error, host.Settings().Shards)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = host.StartReplica(i, true)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// openCluster starts the Raft mux, the host (with no replica: the cluster
// runtime starts those the map gives this node) and the cluster runtime,
// then the API server over them. The listeners are open already: the
// cluster gossips the client address.
func (n *Node) openCluster(opts api.Options) error {
	cfg := n.cfg
	cc := *cfg.Cluster
	if cc.RaftListen == "" {
		cc.RaftListen = DefaultRaftListen
	}
	if cc.GossipListen == "" {
		cc.GossipListen = gossip.DefaultAddr
	}
	mc := raftlog.MuxConfig{Advertise: cc.RaftAdvertise, Faults: cfg.Knobs.RaftFaults, Logger: cfg.Logger}
	if n.tls.peer != nil {
		mc.TLSServer = serverTLS(n.tls.peer, true, cfg.TLS.PeerAllowedNames, n.tls.peer)
		mc.TLSClient = peerClientTLS(n.tls.peer, cfg.TLS.PeerAllowedNames, n.tls.peer)
	}
	mux, err := raftlog.ListenMux(cc.RaftListen, mc)
	if err != nil {
		return err
	}
	hc := cfg.Host
	hc.Mux, hc.HeartbeatTimeout = mux, cc.HeartbeatTimeout
	// The node measures the clock that stamps its shards' entries against
	// its peers', over gossip; its shards refuse leases while it is
	// outside the bound.
	offsets, err := cluster.NewClockOffsets(cluster.ClockOffsetsConfig{Clock: hc.Clock, MaxOffset: hc.MaxClockOffset, Timing: cc.Gossip})
	if err != nil {
		mux.Close()
		return err
	}
	hc.PeerClocks = offsets
	// Its shard leaders hand their leadership to a node with room when
	// its disk is below the reserve, as the nodes gossip their disks.
	disks := cluster.NewDiskStates()
	hc.PeerDisks = disks
	host, err := shard.OpenHost(hc)
	if err != nil {
		mux.Close()
		return err
	}
	grpcAddr := cc.Advertise
	if grpcAddr == "" {
		grpcAddr = n.lis.Addr().String()
	}
	httpAddr := ""
	if n.httpLis != nil {
		httpAddr = n.httpLis.Addr().String()
	}
	var peerConf *tls.Config
	if n.tls.client != nil {
		// Other nodes' client ports: their certificates verified against
		// the client and peer CAs, this node's peer certificate presented.
		peerConf = peerClientTLS(n.tls.peer, nil, n.tls.client, n.tls.peer)
	}
	peers := api.NewPeersTLS(peerConf)
	if cfg.Auth != nil {
		peers.SetToken(cfg.Auth.NodeToken)
	}
	var remote cluster.Remote = peers
	if cfg.Knobs.WrapRemote != nil {
		remote = cfg.Knobs.WrapRemote(peers)
	}
	cn, err := cluster.Start(cluster.Config{
		ID: topology.NodeID(hc.NodeID), GRPCAddr: grpcAddr, HTTPAddr: httpAddr,
		Host: host, Mux: mux, Logs: host.Logs(), SnapshotDir: filepath.Join(hc.DataDir, "snapshots"),
		GossipListen: cc.GossipListen, GossipAdvertise: cc.GossipAdvertise, Join: cc.Join, GossipFaults: cfg.Knobs.GossipFaults,
		GossipEncryption: cc.GossipEncryption, GossipKeyringFile: keyringFile(cc.GossipEncryption, hc.DataDir),
		BootstrapExpect: cc.BootstrapExpect, Replicas: cc.Replicas, GracePeriod: cc.GracePeriod,
		Gossip: cc.Gossip, HeartbeatTimeout: cc.HeartbeatTimeout, Remote: remote, Logger: cfg.Logger,
		ClockOffsets: offsets, DiskStates: disks,
	})
	if err != nil {
		peers.Close()
		host.Close()
		mux.Close()
		return err
	}
	n.host, n.mux, n.cluster, n.peers = host, mux, cn, peers
	var view api.ClusterView = cn
	if cfg.Knobs.WrapView != nil {
		view = cfg.Knobs.WrapView(cn)
	}
	opts.Cluster, opts.Peers, opts.ClockOffsets, opts.Clock = view, peers, offsets, host.Clock
	if cc.GossipEncryption != nil {
		opts.Keyring = cn
	}
	n.server = api.NewServer(host, opts)
	return nil
}

// keyringFile is where a node keeps its gossip keyring: in its data
// directory, when gossip is encrypted.
func keyringFile(enc *gossip.Encryption, dataDir string) string {
	if enc == nil {
		return ""
	}
	return filepath.Join(dataDir, "gossip.keyring")
}
