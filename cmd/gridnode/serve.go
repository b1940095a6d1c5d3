package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/node"
	"github.com/l4xg/grid/shard"
)

// serve runs a node until SIGINT or SIGTERM, then drains and stops it.
func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		dataDir        = fs.String("data-dir", "./gridnode-data", "data directory (Raft logs, snapshots, hard settings)")
		listen         = fs.String("listen", "127.0.0.1:7420", "client gRPC address")
		httpListen     = fs.String("http-listen", "127.0.0.1:7423", "HTTP address for /metrics, /healthz, /readyz (empty: off)")
		shards         = fs.Int("shards", 0, fmt.Sprintf("shards on this node (hard setting, fixed when the data directory is created; default %d, or what the data directory holds)", shard.DefaultShards))
		nodeID         = fs.String("node-id", "node-1", "node id")
		pprof          = fs.Bool("pprof", false, "serve /debug/pprof/ on the HTTP address")
		logLevel       = fs.String("log-level", "info", "debug, info, warn or error")
		drain          = fs.Duration("shutdown-timeout", 10*time.Second, "how long in-flight requests may take at shutdown")
		hotWindow      = fs.Duration("hot-window", 24*time.Hour, "how long settled records stay in memory before moving to the cold tier")
		hotMax         = fs.Int64("hot-max-bytes", 0, "hot tier budget in bytes; settled records beyond it move to the cold tier early (0: none)")
		inflight       = fs.Int("inflight-entries", 0, fmt.Sprintf("Raft entries each shard leader has on their way at once, each carrying the requests queued meanwhile (1..%d; 0: the default, 1)", shard.MaxInflightLimit))
		faultClockFile = fs.String("fault-clock-file", "", "fault injection (needs --enable-fault-injection): a file holding a duration (\"1.5s\", \"-300ms\") by which this node's clock is moved, re-read while the node runs")
		faultInjection = fs.Bool("enable-fault-injection", false, "allow the fault-injection flags (--fault-clock-file); never on a production node")
		maxOffset      = fs.Duration("max-clock-offset", digest.DefaultMaxClockOffset, "the bound on the clock offset between any two nodes that leases rely on: a leader outside it grants no lease, and clients' lease margins must be at least this (use the same value on every node)")
		// Clustering: any of --join or --bootstrap-expect makes the node a
		// cluster member; without them it is a standalone grid.
		join            = fs.String("join", "", "gossip addresses (host:port,...) of cluster members to join")
		bootstrapExpect = fs.Int("bootstrap-expect", 0, "form a new cluster once this many nodes have met (use the same value on each of them)")
		replicas        = fs.Int("replicas", cluster.DefaultReplicas, "replicas per shard in a new cluster (hard setting, fixed at bootstrap)")
		raftListen      = fs.String("raft-listen", node.DefaultRaftListen, "cluster: Raft address, shared by all the node's shards")
		raftAdvertise   = fs.String("raft-advertise", "", "cluster: Raft address the other nodes dial (default: --raft-listen)")
		gossipListen    = fs.String("gossip-listen", cluster.DefaultGossipAddr, "cluster: gossip (memberlist) address, TCP and UDP")
		gossipAdvertise = fs.String("gossip-advertise", "", "cluster: gossip address the other nodes use (default: --gossip-listen)")
		advertise       = fs.String("advertise", "", "cluster: client gRPC address other nodes and clients use (default: --listen)")
		grace           = fs.Duration("grace-period", topology.DefaultGracePeriod, "cluster: how long a node may be missing before its replicas are replaced")
	)
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected arguments %q\n", fs.Args())
		return 1
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "serve: --log-level: %v\n", err)
		return 1
	}
	if *hotWindow <= 0 || *hotMax < 0 {
		fmt.Fprintf(stderr, "serve: --hot-window must be positive and --hot-max-bytes not negative\n")
		return 1
	}
	if err := shard.ValidateMaxClockOffset(*maxOffset); err != nil {
		fmt.Fprintf(stderr, "serve: --max-clock-offset: %v\n", err)
		return 1
	}
	if err := shard.ValidateMaxInflight(*inflight); err != nil {
		fmt.Fprintf(stderr, "serve: --inflight-entries: %v\n", err)
		return 1
	}
	if *shards < 0 || *shards > shard.DefaultSlots {
		fmt.Fprintf(stderr, "serve: --shards %d out of range 1..%d\n", *shards, shard.DefaultSlots)
		return 1
	}
	if *faultClockFile != "" && !*faultInjection {
		fmt.Fprintf(stderr, "serve: --fault-clock-file is a fault-injection flag: refused without --enable-fault-injection\n")
		return 1
	}
	var cc *node.ClusterConfig
	if *join != "" || *bootstrapExpect > 0 {
		if *bootstrapExpect < 0 || *bootstrapExpect > topology.MaxNodes {
			fmt.Fprintf(stderr, "serve: --bootstrap-expect %d out of range 0..%d\n", *bootstrapExpect, topology.MaxNodes)
			return 1
		}
		if *replicas < 1 || *replicas > topology.MaxReplicas {
			fmt.Fprintf(stderr, "serve: --replicas %d out of range 1..%d\n", *replicas, topology.MaxReplicas)
			return 1
		}
		if err := topology.NodeID(*nodeID).Validate(); err != nil {
			fmt.Fprintf(stderr, "serve: --node-id: %v\n", err)
			return 1
		}
		cc = &node.ClusterConfig{
			RaftListen: *raftListen, RaftAdvertise: *raftAdvertise,
			GossipListen: *gossipListen, GossipAdvertise: *gossipAdvertise, Advertise: *advertise,
			BootstrapExpect: *bootstrapExpect, Replicas: *replicas, GracePeriod: *grace,
		}
		for _, a := range strings.Split(*join, ",") {
			if a = strings.TrimSpace(a); a != "" {
				cc.Join = append(cc.Join, a)
			}
		}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	hc := shard.HostConfig{NodeID: *nodeID, DataDir: *dataDir, Shards: *shards,
		HotWindow: *hotWindow, HotMaxBytes: *hotMax, MaxClockOffset: *maxOffset, MaxInflight: *inflight}
	if *faultClockFile != "" {
		logger.Warn("fault injection enabled: this node's clock follows " + *faultClockFile)
		fc, err := newFaultClock(ctx, *faultClockFile, logger)
		if err != nil {
			fmt.Fprintf(stderr, "serve: --fault-clock-file: %v\n", err)
			return 1
		}
		hc.Clock = fc.Now
	}
	n, err := node.Start(node.Config{
		Host:       hc,
		Listen:     *listen,
		HTTPListen: *httpListen,
		Pprof:      *pprof,
		Version:    version,
		Logger:     logger,
		Cluster:    cc,
	})
	if err != nil {
		logger.Error("cannot start", "err", err)
		if errors.Is(err, shard.ErrHardSettings) {
			return 1
		}
		return 2
	}
	logger.Info("gridnode serving", "version", version, "grpc", n.Addr(), "http", n.HTTPAddr(),
		"data_dir", *dataDir, "shards", n.Host().Settings().Shards, "max_clock_offset", *maxOffset)

	go func() {
		readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		start := time.Now()
		if err := n.WaitReady(readyCtx); err == nil {
			logger.Info("ready", "took", time.Since(start).Round(time.Millisecond))
			if h := n.HTTPAddr(); h != "" {
				fmt.Fprintf(stdout, "%s%s\n", gridproc.ReadyHTTP, h) // before grpc: tools wait for the grpc line
			}
			fmt.Fprintf(stdout, "%s%s\n", gridproc.ReadyGRPC, n.Addr())
		}
	}()
	<-ctx.Done()
	stop() // a second signal now kills the process at once
	logger.Info("shutting down")
	stopCtx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := n.Stop(stopCtx); err != nil {
		logger.Error("shutdown", "err", err)
		return 2
	}
	logger.Info("stopped")
	return 0
}
