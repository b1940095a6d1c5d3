package raftlog

import (
	"errors"
	"fmt"
	"net"
	"sync"
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

// defaultTransportTimeout is TransportConfig.Timeout when it is zero, and
// the write deadline of the answers an append stream sends.
const defaultTransportTimeout = 10 * time.Second

// withDefaults is c with every unset field at its default.
func (c TransportConfig) withDefaults() TransportConfig {
	if c.MaxPool == 0 {
		c.MaxPool = 3
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTransportTimeout
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

// Transport is a group's raft.Transport. Its AppendEntries, heartbeats
// included, go over the node pair's append stream (appendstream.go),
// shared by the groups, and the append stream's requests for the group come
// in through Consumer like every other RPC, heartbeats too
// (SetHeartbeatHandler says why). Every
// other method, and the interfaces raft looks for (WithClose, WithPeers,
// WithPreVote), are the group's NetworkTransport's, on its own mux layer;
// votes and TimeoutNow go again when a pooled connection was dead
// (RequestVote).
type Transport struct {
	*raft.NetworkTransport
	layer       *dialCounter // the NetworkTransport's
	maxPool     int
	mux         *Mux
	group       uint64
	timeout     time.Duration
	onReplicate func(peer raft.ServerID, entries int, took time.Duration)

	consumeCh chan raft.RPC
	shutdown  chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup // the forwarder
}

var (
	_ raft.Transport   = (*Transport)(nil)
	_ raft.WithClose   = (*Transport)(nil)
	_ raft.WithPreVote = (*Transport)(nil)
)

// AppendEntries sends one AppendEntries and waits for its answer; with
// OnReplicate set, one that carried entries is timed. Replication runs
// without pipelines (maxRPCsInFlight), so every entry goes this way. To a
// peer that does not speak the append stream (an older build) it goes
// over the NetworkTransport, and so does one too large for a frame.
func (t *Transport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	start := time.Now()
	err := t.appendEntries(id, target, args, resp)
	if err == nil && t.onReplicate != nil && len(args.Entries) > 0 {
		t.onReplicate(id, len(args.Entries), time.Since(start))
	}
	return err
}

func (t *Transport) appendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	select {
	case <-t.shutdown:
		return raft.ErrTransportShutdown
	default:
	}
	if appendRequestBound(args) > maxStreamedAppend {
		return t.NetworkTransport.AppendEntries(id, target, args, resp)
	}
	err := t.mux.appendPeerFor(string(target)).call(t.group, args, resp, t.timeout, t.shutdown)
	if errors.Is(err, errAppendRefused) {
		return t.NetworkTransport.AppendEntries(id, target, args, resp)
	}
	return err
}

// RequestVote, RequestPreVote and TimeoutNow go over the
// NetworkTransport, which keeps idle connections to each peer in a pool
// and takes one for each RPC without checking it. Elections are rare, so
// a pooled connection has often died since its last use: the peer
// restarted, or a partition closed it. An RPC that fails on one is sent
// again (outliveDeadPool), instead of raft losing the vote and waiting an
// election timeout for the next round.
func (t *Transport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.outliveDeadPool(target, func() error { return t.NetworkTransport.RequestVote(id, target, args, resp) })
}

// RequestPreVote: see RequestVote.
func (t *Transport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.outliveDeadPool(target, func() error { return t.NetworkTransport.RequestPreVote(id, target, args, resp) })
}

// TimeoutNow: see RequestVote.
func (t *Transport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.outliveDeadPool(target, func() error { return t.NetworkTransport.TimeoutNow(id, target, args, resp) })
}

// outliveDeadPool runs rpc to target, and again while it fails on a
// pooled connection (no dial to target ran meanwhile) other than by a
// timeout. The
// NetworkTransport drops a connection an RPC failed on, so after at most
// maxPool such failures the pool is empty and the next attempt dials;
// its outcome is final. A timeout is a live but slow peer (paused, say),
// not a dead connection: it is not waited out again. A dead connection
// fails before the peer reads the request (the write fails, or the peer
// had closed its end); should a peer have read it and died before
// answering, the repeat is harmless: raft grants a vote request repeated
// in its term as it did the first, a pre-vote changes nothing, and a
// TimeoutNow at most starts one more election. A failure while another
// RPC to the same peer dialed is not retried: a retry then could not tell
// a pooled connection from a fresh one. Dials are counted per peer, so
// that an election's requests to a dead peer, which dial, do not stop
// those to a live one from being sent again.
func (t *Transport) outliveDeadPool(target raft.ServerAddress, rpc func() error) error {
	for range t.maxPool {
		dials := t.layer.count(target)
		err := rpc()
		var ne net.Error
		if err == nil || t.layer.count(target) != dials || (errors.As(err, &ne) && ne.Timeout()) {
			return err
		}
		select {
		case <-t.shutdown:
			return err
		default:
		}
	}
	return rpc()
}

// dialCounter is a stream layer that counts its dials to each address
// (outliveDeadPool).
type dialCounter struct {
	raft.StreamLayer
	mu    sync.Mutex
	dials map[raft.ServerAddress]uint64
}

func (d *dialCounter) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	d.dials[address]++
	d.mu.Unlock()
	return d.StreamLayer.Dial(address, timeout)
}

// count is how many dials to address have started.
func (d *dialCounter) count(address raft.ServerAddress) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials[address]
}

// Consumer is the channel of the RPCs the group receives, from the append
// stream and from the NetworkTransport.
func (t *Transport) Consumer() <-chan raft.RPC { return t.consumeCh }

// SetHeartbeatHandler declines raft's fast path for heartbeats: they come
// in through Consumer, to raft's main loop, like every other RPC.
//
// hashicorp/raft 1.7.2 runs its fast path (processHeartbeat) on the
// transport's goroutine, beside the main loop, and it steps the node down
// and raises its term there (hashicorp/raft#695, #701). A leader that was
// stopped (SIGSTOP, a long GC or swap) and resumes to find a heartbeat of
// its successor queued can then append one more entry from its old leader
// loop, stamped with the successor's term: dispatchLogs reads the term
// afresh. When the successor's own entry at that index arrives, the terms
// agree, raft keeps the entry it has, and the replica's log differs from
// the others' there for good, silently. The chaos tool saw it as
// acknowledged Completes forgotten once leadership came back to such a
// replica (chaos/results/2026-12-06-lost-acks). Through the main loop a
// heartbeat can only step the node down between two of its steps. The
// cost is a heartbeat waiting behind a log write of the follower, a few
// milliseconds against an election timeout of hundreds.
func (t *Transport) SetHeartbeatHandler(func(rpc raft.RPC)) {}

// Close stops the transport: the group no longer answers the append
// stream, its calls waiting for an answer or a dial there return
// raft.ErrTransportShutdown (a dial or a write in progress ends within
// the timeout), and the NetworkTransport closes with its layer. It is
// idempotent.
func (t *Transport) Close() error {
	var err error
	t.closeOnce.Do(func() {
		t.mux.stopServingAppends(t.group, t)
		close(t.shutdown)
		err = t.NetworkTransport.Close()
		t.wg.Wait()
	})
	return err
}

// forward passes the NetworkTransport's RPCs on to Consumer.
func (t *Transport) forward() {
	defer t.wg.Done()
	in := t.NetworkTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			select {
			case t.consumeCh <- rpc:
			case <-t.shutdown:
				return
			}
		case <-t.shutdown:
			return
		}
	}
}

// serveAppend hands an AppendEntries that came on an append stream to the
// group's Raft and writes its answer to w, unless the stream closes first.
func (t *Transport) serveAppend(f appendFrame, w *frameWriter, connClosed <-chan struct{}) {
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: f.req, RespChan: respCh}
	var res raft.RPCResponse
	select {
	case t.consumeCh <- rpc:
	case <-t.shutdown:
		res.Error = raft.ErrTransportShutdown
	case <-connClosed:
		return
	}
	if res.Error == nil {
		select {
		case res = <-respCh:
		case <-t.shutdown:
			res.Error = raft.ErrTransportShutdown
		case <-connClosed:
			return
		}
	}
	var errMsg string
	if res.Error != nil {
		errMsg = res.Error.Error()
	}
	out, _ := res.Response.(*raft.AppendEntriesResponse)
	if out == nil {
		out = &raft.AppendEntriesResponse{}
	}
	_ = w.write(func(dst []byte) []byte { return appendResponseFrame(dst, f.call, errMsg, out) })
}

// NewTransport registers group on mux and returns a Transport running on
// its stream layer, without pipelining (see maxRPCsInFlight), and on the
// Mux's append streams. Its LocalAddr is the Mux's advertised address,
// shared by every group on the node. Closing the transport closes the
// layer, which unregisters the group and closes its connections.
func NewTransport(mux *Mux, group uint64, cfg TransportConfig) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	stream, err := mux.Layer(group)
	if err != nil {
		return nil, err
	}
	layer := &dialCounter{StreamLayer: stream, dials: map[raft.ServerAddress]uint64{}}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          layer,
		MaxPool:         cfg.MaxPool,
		Timeout:         cfg.Timeout,
		MaxRPCsInFlight: maxRPCsInFlight,
		Logger:          cfg.Logger,
	})
	t := &Transport{
		NetworkTransport: nt,
		layer:            layer,
		maxPool:          cfg.MaxPool,
		mux:              mux,
		group:            group,
		timeout:          cfg.Timeout,
		onReplicate:      cfg.OnReplicate,
		consumeCh:        make(chan raft.RPC),
		shutdown:         make(chan struct{}),
	}
	mux.serveAppends(group, t)
	t.wg.Add(1)
	go t.forward()
	return t, nil
}
