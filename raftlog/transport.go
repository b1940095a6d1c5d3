package raftlog

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TransportConfig configures NewTransport. The zero value is valid.
type TransportConfig struct {
	// MaxPool is the number of idle outbound connections kept per peer.
	// Zero means 3.
	MaxPool int
	// Timeout bounds dials and each RPC's I/O. Zero means 10 s.
	Timeout time.Duration
	// Logger receives the transport's messages. Nil discards them.
	Logger hclog.Logger
	// OnReplicate, when set, is told of each AppendEntries that carried
	// entries and was answered: the follower it went to, how many entries
	// and the time from sending to the answer, which holds the follower's
	// log write. Heartbeats are not reported. It must not block.
	OnReplicate func(peer raft.ServerID, entries int, took time.Duration)
}

// withDefaults is c with every unset field at its default.
func (c TransportConfig) withDefaults() TransportConfig {
	if c.MaxPool == 0 {
		c.MaxPool = 3
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Validate reports whether c, with its defaults, is usable, wrapping
// ErrInvalidOptions if not.
func (c TransportConfig) Validate() error {
	c = c.withDefaults()
	if c.MaxPool < 0 || c.Timeout < 0 {
		return fmt.Errorf("%w: negative TransportConfig field: %+v", ErrInvalidOptions, c)
	}
	return nil
}

// maxRPCsInFlight is 1: no pipelined AppendEntries. hashicorp/raft 1.7.2
// can hang in Shutdown while a pipeline to a follower is stuck (raft#612);
// with fewer than 2 RPCs in flight the NetworkTransport refuses pipelines
// (raft.ErrPipelineReplicationNotSupported) and replication sends one
// AppendEntries at a time, so that path is never taken. Measured with
// shard's BenchmarkReplicatedPropose in same-minute pairs, the cost is
// within the noise of a shared 2-core box (paired median ratio 0.97):
// entries are large (group commit) and one is in flight per shard anyway.
const maxRPCsInFlight = 1

// Transport is a raft.NetworkTransport that times the AppendEntries which
// replicate entries (TransportConfig.OnReplicate). Every other method,
// and the interfaces raft looks for (WithClose, WithPeers, WithPreVote),
// are the NetworkTransport's.
type Transport struct {
	*raft.NetworkTransport
	onReplicate func(peer raft.ServerID, entries int, took time.Duration)
}

// AppendEntries sends one AppendEntries and waits for its answer; with
// OnReplicate set, one that carried entries is timed. Replication runs
// without pipelines (maxRPCsInFlight), so every entry goes this way.
func (t *Transport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.onReplicate == nil || len(args.Entries) == 0 {
		return t.NetworkTransport.AppendEntries(id, target, args, resp)
	}
	start := time.Now()
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.onReplicate(id, len(args.Entries), time.Since(start))
	}
	return err
}

// NewTransport registers group on mux and returns a Transport running on
// its stream layer, without pipelining (see maxRPCsInFlight). Its
// LocalAddr is the Mux's advertised address, shared by every group on the
// node. Closing the transport closes the layer, which unregisters the
// group and closes its connections.
func NewTransport(mux *Mux, group uint64, cfg TransportConfig) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	stream, err := mux.Layer(group)
	if err != nil {
		return nil, err
	}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          stream,
		MaxPool:         cfg.MaxPool,
		Timeout:         cfg.Timeout,
		MaxRPCsInFlight: maxRPCsInFlight,
		Logger:          cfg.Logger,
	})
	return &Transport{NetworkTransport: nt, onReplicate: cfg.OnReplicate}, nil
}
