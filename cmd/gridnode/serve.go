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

	"go.yaml.in/yaml/v3"

	"github.com/l4xg/grid/api"
	"github.com/l4xg/grid/cluster"
	"github.com/l4xg/grid/cluster/gossip"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/internal/buildinfo"
	"github.com/l4xg/grid/internal/gridproc"
	"github.com/l4xg/grid/node"
	"github.com/l4xg/grid/shard"
)

// serveFlags are the settings of gridnode serve. Each is a flag, a key of
// the config file (the flag's name) and a GRID_* environment variable
// (config.go).
type serveFlags struct {
	fs         *flag.FlagSet
	configFile *string

	dataDir, listen, httpListen, nodeID, logLevel, logFormat *string
	shards, inflight                                         *int
	pprof                                                    *bool
	drain, hotWindow, maxOffset                              *time.Duration
	hotMax, diskReserve                                      *int64
	faultClockFile                                           *string
	faultInjection                                           *bool

	join, raftListen, raftAdvertise, gossipListen, gossipAdvertise, advertise *string
	bootstrapExpect, replicas                                                 *int
	grace                                                                     *time.Duration

	// TLS, etcd's flag names.
	certFile, keyFile, trustedCA, peerCert, peerKey, peerCA, peerNames *string
	clientCertAuth                                                     *bool

	// Gossip encryption.
	gossipKeyFile                   *string
	gossipVerifyIn, gossipVerifyOut *bool

	// Auth.
	authTokens, nodeToken, auditLog *string
	rateLimit                       *float64
	metricsOpen                     *bool
}

// newServeFlags defines the flags of serve on a new FlagSet writing its
// errors and usage to out.
func newServeFlags(out io.Writer) *serveFlags {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(out)
	return &serveFlags{
		fs:             fs,
		configFile:     fs.String(configFlag, "", "config file (YAML; keys are these flags' names): flags override environment variables (GRID_*), which override the file"),
		dataDir:        fs.String("data-dir", "./gridnode-data", "data directory (Raft logs, snapshots, hard settings)"),
		listen:         fs.String("listen", "127.0.0.1:7420", "client gRPC address"),
		httpListen:     fs.String("http-listen", "127.0.0.1:7423", "HTTP address for /metrics, /healthz, /readyz (empty: off)"),
		shards:         fs.Int("shards", 0, fmt.Sprintf("shards of the grid (hard setting, fixed when the data directory is created; default %d standalone; a new cluster member takes the cluster's, and a new cluster has as few as give each founding node a replica, --bootstrap-expect / --replicas rounded up; or what the data directory holds)", shard.DefaultShards)),
		nodeID:         fs.String("node-id", "node-1", "node id"),
		pprof:          fs.Bool("pprof", false, "serve /debug/pprof/ on the HTTP address"),
		logLevel:       fs.String("log-level", "info", "debug, info, warn or error (reloaded on SIGHUP)"),
		logFormat:      fs.String("log-format", "text", "text (key=value lines) or json (one JSON object a line)"),
		drain:          fs.Duration("shutdown-timeout", 10*time.Second, "how long in-flight requests may take at shutdown (reloaded on SIGHUP)"),
		hotWindow:      fs.Duration("hot-window", 24*time.Hour, "how long settled records stay in memory before moving to the cold tier (reloaded on SIGHUP)"),
		hotMax:         fs.Int64("hot-max-bytes", 0, "hot tier budget in bytes; settled records beyond it move to the cold tier early (0: none; reloaded on SIGHUP)"),
		diskReserve:    fs.Int64("disk-reserve-bytes", shard.DefaultDiskReserve, "room to keep on the data directory's file system: below it new keys (Reserve) are refused with ResourceExhausted while settles, reads and Raft's own writes go on, until space is freed (-1: none)"),
		inflight:       fs.Int("inflight-entries", 0, fmt.Sprintf("Raft entries each shard leader has on their way at once, each carrying the requests queued meanwhile (1..%d; 0: the default, 1)", shard.MaxInflightLimit)),
		faultClockFile: fs.String("fault-clock-file", "", "fault injection (needs --enable-fault-injection): a file holding a duration (\"1.5s\", \"-300ms\") by which this node's clock is moved, re-read while the node runs"),
		faultInjection: fs.Bool("enable-fault-injection", false, "allow the fault-injection flags (--fault-clock-file); never on a production node"),
		maxOffset:      fs.Duration("max-clock-offset", digest.DefaultMaxClockOffset, "the bound on the clock offset between any two nodes that leases rely on: a leader outside it grants no lease, and clients' lease margins must be at least this (use the same value on every node)"),
		// Clustering: any of --join or --bootstrap-expect makes the node a
		// cluster member; without them it is a standalone grid.
		join:            fs.String("join", "", "gossip addresses (host:port,...) of cluster members to join"),
		bootstrapExpect: fs.Int("bootstrap-expect", 0, "form a new cluster once this many nodes have met (use the same value on each of them)"),
		replicas:        fs.Int("replicas", cluster.DefaultReplicas, "replicas per shard in a new cluster (hard setting, fixed at bootstrap)"),
		raftListen:      fs.String("raft-listen", node.DefaultRaftListen, "cluster: Raft address, shared by all the node's shards"),
		raftAdvertise:   fs.String("raft-advertise", "", "cluster: Raft address the other nodes dial (default: --raft-listen)"),
		gossipListen:    fs.String("gossip-listen", gossip.DefaultAddr, "cluster: gossip (memberlist) address, TCP and UDP"),
		gossipAdvertise: fs.String("gossip-advertise", "", "cluster: gossip address the other nodes use (default: --gossip-listen)"),
		advertise:       fs.String("advertise", "", "cluster: client gRPC address other nodes and clients use (default: --listen)"),
		grace:           fs.Duration("grace-period", topology.DefaultGracePeriod, "cluster: how long a node may be missing before its replicas are replaced"),
		certFile:        fs.String("cert-file", "", "TLS certificate of the client gRPC and HTTP ports (re-read when it changes)"),
		keyFile:         fs.String("key-file", "", "key of --cert-file"),
		trustedCA:       fs.String("trusted-ca-file", "", "CA bundle client certificates must chain to (with --client-cert-auth)"),
		clientCertAuth:  fs.Bool("client-cert-auth", false, "require a client certificate that chains to --trusted-ca-file on the client port"),
		peerCert:        fs.String("peer-cert-file", "", "TLS certificate of the Raft port and of this node's calls to the others (mutual TLS between nodes)"),
		peerKey:         fs.String("peer-key-file", "", "key of --peer-cert-file"),
		peerCA:          fs.String("peer-trusted-ca-file", "", "CA bundle other nodes' peer certificates must chain to"),
		gossipKeyFile:   fs.String("gossip-key-file", "", "gossip encryption keys: a file of base64 keys (16, 24 or 32 bytes), one a line, the primary first; re-read on SIGHUP (make a key with gridnode gossip-keygen)"),
		gossipVerifyIn:  fs.Bool("gossip-verify-incoming", true, "with --gossip-key-file: refuse plaintext gossip (off while a cluster moves to encryption)"),
		gossipVerifyOut: fs.Bool("gossip-verify-outgoing", true, "with --gossip-key-file: send encrypted gossip (off while a cluster moves to encryption)"),
		authTokens:      fs.String("auth-tokens-file", "", "turn on bearer-token auth, default deny: a YAML file of tokens (name, sha256 of the token, role consumer|operator|admin, namespaces); see gridnode token-hash"),
		nodeToken:       fs.String("auth-node-token-file", "", "with --auth-tokens-file in a cluster: a file holding the token (an admin one of the tokens file) this node presents on its own calls to the others"),
		metricsOpen:     fs.Bool("auth-metrics-open", false, "with --auth-tokens-file: serve /metrics without a token (otherwise any valid token; pprof needs an admin's)"),
		auditLog:        fs.String("audit-log", "", "append the audit log (JSON lines: refused calls, forget, drain, audit, shard admin; digests, never keys) to this file (- for stderr)"),
		rateLimit:       fs.Float64("rate-limit-per-namespace", 0, "operations a second each namespace may make, with a burst of one second's worth; past it calls fail with ResourceExhausted and a retry-after (0: no limit)"),
		peerNames:       fs.String("peer-allowed-names", "", "comma-separated names (DNS or IP SANs, or common name) a peer certificate must carry one of (default: any the CA signed)"),
	}
}

// gossipEncryption reads --gossip-key-file (nil without it).
func (f *serveFlags) gossipEncryption() (*gossip.Encryption, error) {
	if *f.gossipKeyFile == "" {
		return nil, nil
	}
	keys, err := readGossipKeys(*f.gossipKeyFile)
	if err != nil {
		return nil, err
	}
	return &gossip.Encryption{Keys: keys, VerifyIncoming: *f.gossipVerifyIn, VerifyOutgoing: *f.gossipVerifyOut}, nil
}

// readGossipKeys reads a gossip key file.
func readGossipKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	keys, err := gossip.ParseKeys(string(b))
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file %s: %w", path, err)
	}
	return keys, nil
}

// authConfig reads the auth files (nil without --auth-tokens-file). The
// audit log's file is opened for appending; close is the caller's.
func (f *serveFlags) authConfig(stderr io.Writer) (*node.AuthConfig, func(), error) {
	none := func() {}
	if *f.authTokens == "" {
		if *f.nodeToken != "" || *f.auditLog != "" {
			return nil, none, errors.New("--auth-node-token-file and --audit-log need --auth-tokens-file")
		}
		return nil, none, nil
	}
	b, err := os.ReadFile(*f.authTokens)
	if err != nil {
		return nil, none, fmt.Errorf("--auth-tokens-file: %w", err)
	}
	var file struct {
		Tokens []api.Token `yaml:"tokens"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		return nil, none, fmt.Errorf("--auth-tokens-file %s: %w", *f.authTokens, err)
	}
	c := &node.AuthConfig{Tokens: file.Tokens, MetricsOpen: *f.metricsOpen}
	if *f.nodeToken != "" {
		t, err := os.ReadFile(*f.nodeToken)
		if err != nil {
			return nil, none, fmt.Errorf("--auth-node-token-file: %w", err)
		}
		c.NodeToken = strings.TrimSpace(string(t))
	}
	switch *f.auditLog {
	case "":
	case "-":
		c.Audit = stderr
	default:
		fl, err := os.OpenFile(*f.auditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, none, fmt.Errorf("--audit-log: %w", err)
		}
		c.Audit = fl
		return c, func() { fl.Close() }, nil
	}
	return c, none, nil
}

// tlsConfig is the node's TLS as the flags give it.
func (f *serveFlags) tlsConfig() node.TLSConfig {
	c := node.TLSConfig{
		Client:         node.CertFiles{CertFile: *f.certFile, KeyFile: *f.keyFile, CAFile: *f.trustedCA},
		ClientCertAuth: *f.clientCertAuth,
		Peer:           node.CertFiles{CertFile: *f.peerCert, KeyFile: *f.peerKey, CAFile: *f.peerCA},
	}
	for _, n := range strings.Split(*f.peerNames, ",") {
		if n = strings.TrimSpace(n); n != "" {
			c.PeerAllowedNames = append(c.PeerAllowedNames, n)
		}
	}
	return c
}

// validate checks the settings' values, naming the flag of the first that
// is wrong.
func (f *serveFlags) validate() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*f.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	switch {
	case *f.logFormat != "text" && *f.logFormat != "json":
		return fmt.Errorf("--log-format %q: want text or json", *f.logFormat)
	case *f.diskReserve < -1:
		return errors.New("--disk-reserve-bytes must be -1 (none), 0 (the default) or a number of bytes")
	case *f.hotWindow <= 0 || *f.hotMax < 0:
		return errors.New("--hot-window must be positive and --hot-max-bytes not negative")
	case *f.shards < 0 || *f.shards > shard.DefaultSlots:
		return fmt.Errorf("--shards %d out of range 1..%d", *f.shards, shard.DefaultSlots)
	case *f.faultClockFile != "" && !*f.faultInjection:
		return errors.New("--fault-clock-file is a fault-injection flag: refused without --enable-fault-injection")
	case *f.drain <= 0:
		return fmt.Errorf("--shutdown-timeout %v must be positive", *f.drain)
	}
	if err := shard.ValidateMaxClockOffset(*f.maxOffset); err != nil {
		return fmt.Errorf("--max-clock-offset: %v", err)
	}
	if *f.rateLimit < 0 {
		return fmt.Errorf("--rate-limit-per-namespace %g must not be negative", *f.rateLimit)
	}
	if err := f.tlsConfig().Validate(); err != nil {
		return fmt.Errorf("TLS flags (--cert-file, --key-file, --trusted-ca-file, --client-cert-auth, --peer-*): %v", err)
	}
	if err := shard.ValidateMaxInflight(*f.inflight); err != nil {
		return fmt.Errorf("--inflight-entries: %v", err)
	}
	if !f.clustered() {
		return nil
	}
	if *f.bootstrapExpect < 0 || *f.bootstrapExpect > topology.MaxNodes {
		return fmt.Errorf("--bootstrap-expect %d out of range 0..%d", *f.bootstrapExpect, topology.MaxNodes)
	}
	if *f.replicas < 1 || *f.replicas > topology.MaxReplicas {
		return fmt.Errorf("--replicas %d out of range 1..%d", *f.replicas, topology.MaxReplicas)
	}
	if err := topology.NodeID(*f.nodeID).Validate(); err != nil {
		return fmt.Errorf("--node-id: %v", err)
	}
	return nil
}

// clustered: any of --join or --bootstrap-expect makes the node a cluster
// member.
func (f *serveFlags) clustered() bool { return *f.join != "" || *f.bootstrapExpect > 0 }

// level is --log-level, once validated.
func (f *serveFlags) level() slog.Level {
	var level slog.Level
	_ = level.UnmarshalText([]byte(*f.logLevel))
	return level
}

// serve runs a node until SIGINT or SIGTERM, then drains and stops it.
// SIGHUP reloads the config file and the soft settings (config.go).
func serve(args []string, stdout, stderr io.Writer) int {
	f := newServeFlags(stderr)
	settings, err := f.load(args, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		if !errors.Is(err, errFlagParse) {
			fmt.Fprintf(stderr, "serve: %v\n", err)
		}
		return 1
	}
	if err := f.validate(); err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", err)
		return 1
	}
	var (
		dataDir, listen, httpListen, nodeID = f.dataDir, f.listen, f.httpListen, f.nodeID
		shards, inflight, pprof, hotWindow  = f.shards, f.inflight, f.pprof, f.hotWindow
		hotMax, maxOffset                   = f.hotMax, f.maxOffset
		faultClockFile                      = f.faultClockFile
	)
	var cc *node.ClusterConfig
	if f.clustered() {
		enc, err := f.gossipEncryption()
		if err != nil {
			fmt.Fprintf(stderr, "serve: %v\n", err)
			return 1
		}
		cc = &node.ClusterConfig{
			GossipEncryption: enc,
			RaftListen:       *f.raftListen, RaftAdvertise: *f.raftAdvertise,
			GossipListen: *f.gossipListen, GossipAdvertise: *f.gossipAdvertise, Advertise: *f.advertise,
			BootstrapExpect: *f.bootstrapExpect, Replicas: *f.replicas, GracePeriod: *f.grace,
		}
		for _, a := range strings.Split(*f.join, ",") {
			if a = strings.TrimSpace(a); a != "" {
				cc.Join = append(cc.Join, a)
			}
		}
	}
	level := new(slog.LevelVar)
	level.Set(f.level())
	logger := newLogger(stderr, *f.logFormat, level)
	for _, w := range strayEnv(os.Environ(), f.fs) {
		logger.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	hc := shard.HostConfig{NodeID: *nodeID, DataDir: *dataDir, Shards: *shards,
		HotWindow: *hotWindow, HotMaxBytes: *hotMax, MaxClockOffset: *maxOffset, MaxInflight: *inflight, DiskReserve: *f.diskReserve}
	if *faultClockFile != "" {
		logger.Warn("fault injection enabled: this node's clock follows " + *faultClockFile)
		fc, err := newFaultClock(ctx, *faultClockFile, logger)
		if err != nil {
			fmt.Fprintf(stderr, "serve: --fault-clock-file: %v\n", err)
			return 1
		}
		hc.Clock = fc.Now
	}
	auth, closeAudit, err := f.authConfig(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", err)
		return 1
	}
	defer closeAudit()
	tp, stopTracing, err := tracingFromEnv(ctx, os.LookupEnv, *nodeID)
	if err != nil {
		fmt.Fprintf(stderr, "serve: tracing: %v\n", err)
		return 1
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(flushCtx); err != nil {
			logger.Warn("tracing: flushing the last spans", "err", err)
		}
	}()
	if tp != nil {
		logger.Info("tracing on: OTLP export as the OTEL_* variables say")
	}
	n, err := node.Start(node.Config{
		TracerProvider: tp,
		TLS:            f.tlsConfig(),
		Auth:           auth,
		RateLimit:      *f.rateLimit,
		Host:           hc,
		Listen:         *listen,
		HTTPListen:     *httpListen,
		Pprof:          *pprof,
		Version:        version,
		Logger:         logger,
		Cluster:        cc,
	})
	if err != nil {
		logger.Error("cannot start", "err", err)
		if errors.Is(err, shard.ErrHardSettings) {
			return 1
		}
		return 2
	}
	bi := buildinfo.Read(version)
	logger.Info("gridnode serving", "version", bi.Version, "commit", bi.CommitLabel(), "go", bi.GoVersion, "grpc", n.Addr(), "http", n.HTTPAddr(),
		"data_dir", *dataDir, "shards", shardsLogged(n.Host().Settings().Shards), "max_clock_offset", *maxOffset,
		"config", settings.file)
	r := &reloader{args: args, env: os.LookupEnv, current: settings, level: level, host: n.Host(), log: logger}
	if c := n.Cluster(); c != nil && *f.gossipKeyFile != "" {
		r.gossipKeys = c.SetGossipKeys
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				r.reload()
			}
		}
	}()

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
	stopCtx, cancel := context.WithTimeout(context.Background(), r.shutdownTimeout())
	defer cancel()
	if err := n.Stop(stopCtx); err != nil {
		logger.Error("shutdown", "err", err)
		return 2
	}
	logger.Info("stopped")
	return 0
}

// shardsLogged is the shard count the start line shows: a new cluster
// member has none until it learns the cluster's.
func shardsLogged(n int) any {
	if n == 0 {
		return "the cluster's"
	}
	return n
}

// newLogger is serve's logger: --log-format's handler at level.
func newLogger(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
