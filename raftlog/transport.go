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
	// MaxRPCsInFlight bounds pipelined AppendEntries per follower; zero
	// means raft's default (2), 1 disables pipelining.
	MaxRPCsInFlight int
	// Logger receives the transport's messages. Nil discards them.
	Logger hclog.Logger
}

// Validate checks the config.
func (c TransportConfig) Validate() error {
	if c.MaxPool < 0 || c.Timeout < 0 || c.MaxRPCsInFlight < 0 {
		return fmt.Errorf("%w: negative TransportConfig field: %+v", ErrInvalidOptions, c)
	}
	return nil
}

// NewTransport registers group on mux and returns a raft.NetworkTransport
// running on its stream layer. Its LocalAddr is the Mux's advertised
// address, shared by every group on the node. Closing the transport closes
// the layer, which unregisters the group and closes its connections.
func NewTransport(mux *Mux, group uint64, cfg TransportConfig) (*raft.NetworkTransport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxPool == 0 {
		cfg.MaxPool = 3
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	stream, err := mux.Layer(group)
	if err != nil {
		return nil, err
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          stream,
		MaxPool:         cfg.MaxPool,
		Timeout:         cfg.Timeout,
		MaxRPCsInFlight: cfg.MaxRPCsInFlight,
		Logger:          cfg.Logger,
	}), nil
}
