package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/cluster/topology"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/shard"
)

// code maps an error of keyspace, shard, cluster or api to its gRPC code.
// This is the one place where that mapping lives; the client maps the codes
// back. An error that already is a gRPC status (the answer of a node a
// request was forwarded to) keeps its code.
func code(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, digest.ErrBatchTooLarge), errors.Is(err, digest.ErrResultTooLarge),
		errors.Is(err, shard.ErrDiskFull):
		return codes.ResourceExhausted
	case errors.Is(err, digest.ErrInvalidNamespace), errors.Is(err, digest.ErrEmptyKey),
		errors.Is(err, digest.ErrKeyTooLong), errors.Is(err, digest.ErrEntityTooLong),
		errors.Is(err, digest.ErrLeaseOutOfRange), errors.Is(err, digest.ErrRetention),
		errors.Is(err, digest.ErrRetryAfter), errors.Is(err, digest.ErrMaxAttempts),
		errors.Is(err, digest.ErrInvalidToken), errors.Is(err, digest.ErrEmptyBatch),
		errors.Is(err, digest.ErrRequestIDTooLong),
		errors.Is(err, errNoOperation), errors.Is(err, errBadDigest), errors.Is(err, errAuditRange),
		errors.Is(err, errBadAdmin), errors.Is(err, errBadNodeID):
		return codes.InvalidArgument
	case errors.Is(err, errUnknownNode):
		return codes.NotFound
	case errors.Is(err, errStandalone), errors.Is(err, topology.ErrRejected), errors.Is(err, topology.ErrStaleFence),
		errors.Is(err, shard.ErrNotVoter):
		return codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, shard.ErrClockOffset):
		// A leader that may not grant leases now (its clock): nothing was
		// applied; the client retries, on the leader it hands over to.
		return codes.Unavailable
	case errors.Is(err, shard.ErrNotLeader), errors.Is(err, shard.ErrClosed),
		errors.Is(err, shard.ErrOutcomeUnknown), errors.Is(err, errNotHosted),
		errors.Is(err, errStarting), errors.Is(err, errRemoved), errors.Is(err, errForwardUnknown),
		errors.Is(err, topology.ErrNotControlLeader), errors.Is(err, topology.ErrNotShardLeader):
		return codes.Unavailable
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Internal
}

// toStatus turns err into a gRPC status error carrying its message, and
// its Redirect as a status detail when it has one. A status error (a
// forwarded call's answer) passes through with its details.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var re *redirectError
	if errors.As(err, &re) {
		if st, derr := status.New(code(err), err.Error()).WithDetails(re.to); derr == nil {
			return st.Err()
		}
	}
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	if errors.Is(err, topology.ErrStaleFence) {
		info := &errdetails.ErrorInfo{Reason: reasonStaleFence, Domain: errorDomain}
		if st, derr := status.New(code(err), err.Error()).WithDetails(info); derr == nil {
			return st.Err()
		}
	}
	return status.Error(code(err), err.Error())
}

// The ErrorInfo that marks a refusal for a stale fence, so that the
// sender's Peers gets topology.ErrStaleFence back (fromStatus).
const (
	errorDomain      = "grid.l4xg"
	reasonStaleFence = "STALE_FENCE"
)

// fromStatus returns the sentinel a peer's status error stands for, or nil:
// topology.ErrStaleFence for a refused stale fence.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain && info.GetReason() == reasonStaleFence {
			return topology.ErrStaleFence
		}
	}
	return nil
}

// errResult is the failure of one operation of a batch.
func errResult(err error) *gridpb.OpResult {
	e := &gridpb.OpError{Code: int32(code(err)), Message: err.Error(), Redirect: redirectOf(err)}
	if st, ok := status.FromError(err); ok {
		e.Message = st.Message() // a peer's answer: its own words, without the "rpc error" prefix
	}
	return &gridpb.OpResult{Error: e}
}

// redirectOf returns the Redirect err carries, as a redirectError or as
// the detail of a peer's status, or nil.
func redirectOf(err error) *gridpb.Redirect {
	var re *redirectError
	if errors.As(err, &re) {
		return re.to
	}
	if st, ok := status.FromError(err); ok {
		for _, d := range st.Details() {
			if rd, ok := d.(*gridpb.Redirect); ok {
				return rd
			}
		}
	}
	return nil
}

// redirectError is the refusal of an operation this node cannot serve
// (cause is errNotHosted, shard.ErrNotLeader, errStarting or errRemoved):
// nothing was applied, and to says where to send it, or why this node
// serves nothing (to.Reason).
type redirectError struct {
	to    *gridpb.Redirect
	cause error
}

func (e *redirectError) Error() string {
	switch e.to.Reason {
	case gridpb.ReasonStarting, gridpb.ReasonRemoved:
		return e.cause.Error() // about the node, not a shard
	}
	if e.to.LeaderId == "" {
		return fmt.Sprintf("shard %d has no known leader: %v", e.to.Shard, e.cause)
	}
	addr := e.to.LeaderAddr
	if addr == "" {
		addr = "an unknown address"
	}
	return fmt.Sprintf("shard %d is led by %s at %s: %v", e.to.Shard, e.to.LeaderId, addr, e.cause)
}

func (e *redirectError) Unwrap() error { return e.cause }

var (
	errNoOperation = errors.New("api: batch operation has no request set")
	errBadDigest   = errors.New("api: invalid digest")
	errAuditRange  = errors.New("api: invalid audit range")
	// errNotHosted: this node holds no replica of the operation's shard.
	// Nothing was applied.
	errNotHosted = errors.New("api: shard not hosted on this node")
	// errStarting: a cluster node has no map yet (it is starting, or
	// restarting and has not caught up with the cluster), so it can
	// neither serve nor forward. Nothing was applied.
	errStarting = errors.New("api: node is starting and has no cluster map yet; nothing was applied, another node can serve")
	// errRemoved: the cluster map says this node was removed: it serves
	// nothing. Nothing was applied.
	errRemoved = errors.New("api: node was removed from the cluster and serves nothing; nothing was applied, another node can serve")
	// errForwardUnknown: a forwarded call failed on its way (transport
	// error, the peer gone): the peer may have applied it.
	errForwardUnknown = errors.New("api: forwarded call failed, outcome unknown")
	errStandalone     = errors.New("api: standalone node")
	errBadAdmin       = errors.New("api: invalid shard admin request")
	errBadNodeID      = errors.New("api: invalid node id")
	errUnknownNode    = errors.New("api: unknown node")
)
