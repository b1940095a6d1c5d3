package api

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/shard"
)

// code maps an error of keyspace or shard to its gRPC code. This is the one
// place where that mapping lives; the client maps the codes back.
func code(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, keyspace.ErrBatchTooLarge), errors.Is(err, keyspace.ErrResultTooLarge):
		return codes.ResourceExhausted
	case errors.Is(err, keyspace.ErrInvalidNamespace), errors.Is(err, keyspace.ErrEmptyKey),
		errors.Is(err, keyspace.ErrKeyTooLong), errors.Is(err, keyspace.ErrEntityTooLong),
		errors.Is(err, keyspace.ErrLeaseOutOfRange), errors.Is(err, keyspace.ErrRetention),
		errors.Is(err, keyspace.ErrRetryAfter), errors.Is(err, keyspace.ErrMaxAttempts),
		errors.Is(err, keyspace.ErrInvalidToken), errors.Is(err, keyspace.ErrEmptyBatch),
		errors.Is(err, errNoOperation), errors.Is(err, errBadDigest), errors.Is(err, errAuditRange):
		return codes.InvalidArgument
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, shard.ErrNotLeader), errors.Is(err, shard.ErrClosed),
		errors.Is(err, shard.ErrOutcomeUnknown):
		return codes.Unavailable
	default:
		return codes.Internal
	}
}

// toStatus turns err into a gRPC status error carrying its message.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(code(err), err.Error())
}

var (
	errNoOperation = errors.New("api: batch operation has no request set")
	errBadDigest   = errors.New("api: invalid digest")
	errAuditRange  = errors.New("api: invalid audit range")
)
