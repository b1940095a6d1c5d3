package api

import (
	"fmt"
	"math"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
	"github.com/l4xg/grid/shard"
)

// target is a validated operation: a command for the log, or a read.
type target struct {
	read    bool
	staleOK bool
	cmd     keyspace.Command
}

// recordDigest validates a key's name and returns its record digest.
func recordDigest(ns string, key, entity []byte) (digest.Digest, error) {
	if err := digest.ValidateNamespace(ns); err != nil {
		return digest.Digest{}, err
	}
	if err := digest.ValidateKey(key); err != nil {
		return digest.Digest{}, err
	}
	if err := digest.ValidateEntity(entity); err != nil {
		return digest.Digest{}, err
	}
	return digest.Record(ns, key, entity), nil
}

// orDefault converts milliseconds from the wire, 0 meaning def. Values so
// large that the conversion would overflow come out as math.MaxInt64, which
// every range check refuses, instead of wrapping into a valid-looking value.
func orDefault(ms int64, def time.Duration) time.Duration {
	switch {
	case ms == 0:
		return def
	case ms > math.MaxInt64/int64(time.Millisecond) || ms < math.MinInt64/int64(time.Millisecond):
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

func lease(ms int64) (int64, error) {
	d := orDefault(ms, digest.DefaultLease)
	return d.Milliseconds(), digest.ValidateLease(d)
}

func retention(ms int64, def time.Duration) (int64, error) {
	d := orDefault(ms, def)
	return d.Milliseconds(), digest.ValidateRetention(d)
}

func reserveCommand(r *gridpb.ReserveRequest) (t target, err error) {
	c := &t.cmd
	c.Op = keyspace.OpReserve
	if c.Digest, err = recordDigest(string(r.GetNamespace()), r.GetKey(), r.GetEntity()); err != nil {
		return t, err
	}
	if c.Lease, err = lease(r.GetLeaseMs()); err != nil {
		return t, err
	}
	if c.Retention, err = retention(r.GetPoisonRetentionMs(), digest.DefaultPoisonRetention); err != nil {
		return t, fmt.Errorf("poison_retention: %w", err)
	}
	attempts := int(r.GetMaxAttempts())
	if attempts == 0 {
		attempts = digest.DefaultMaxAttempts
	}
	if err = digest.ValidateMaxAttempts(attempts); err != nil {
		return t, err
	}
	c.MaxAttempts = uint8(attempts)
	if r.Fingerprint != nil {
		c.HasFingerprint, c.Fingerprint = true, r.GetFingerprint()
	}
	if len(r.GetEntity()) > 0 {
		c.HasEntity, c.Entity, c.Version = true, digest.Entity(string(r.GetNamespace()), r.GetEntity()), r.GetVersion()
	}
	if err = digest.ValidateRequestID(r.GetRequestId()); err != nil {
		return t, err
	}
	if id := r.GetRequestId(); len(id) > 0 {
		c.HasRequestID, c.RequestID = true, keyspace.RequestIDHash(id)
	}
	return t, nil
}

func settleCommand(op keyspace.Op, ns string, key, entity []byte, token uint64) (t target, err error) {
	t.cmd.Op = op
	if t.cmd.Digest, err = recordDigest(ns, key, entity); err != nil {
		return t, err
	}
	t.cmd.Token = token
	return t, digest.ValidateToken(token)
}

func completeCommand(r *gridpb.CompleteRequest) (target, error) {
	t, err := settleCommand(keyspace.OpComplete, string(r.GetNamespace()), r.GetKey(), r.GetEntity(), r.GetToken())
	if err != nil {
		return t, err
	}
	if t.cmd.Retention, err = retention(r.GetRetentionMs(), digest.DefaultRetention); err != nil {
		return t, err
	}
	if err = digest.ValidateResult(r.GetResult()); err != nil {
		return t, err
	}
	t.cmd.Result = r.GetResult()
	return t, nil
}

func failCommand(r *gridpb.FailRequest) (target, error) {
	t, err := settleCommand(keyspace.OpFail, string(r.GetNamespace()), r.GetKey(), r.GetEntity(), r.GetToken())
	if err != nil {
		return t, err
	}
	if t.cmd.Retention, err = retention(r.GetRetentionMs(), digest.DefaultPoisonRetention); err != nil {
		return t, err
	}
	if r.RetryAfterMs != nil {
		d := orDefault(r.GetRetryAfterMs(), 0)
		if err = digest.ValidateRetryAfter(d); err != nil {
			return t, err
		}
		t.cmd.HasRetryAfter, t.cmd.RetryAfter = true, d.Milliseconds()
	}
	t.cmd.Poison = r.GetPoison()
	return t, nil
}

func releaseCommand(r *gridpb.ReleaseRequest) (target, error) {
	return settleCommand(keyspace.OpRelease, string(r.GetNamespace()), r.GetKey(), r.GetEntity(), r.GetToken())
}

func extendCommand(r *gridpb.ExtendRequest) (target, error) {
	t, err := settleCommand(keyspace.OpExtend, string(r.GetNamespace()), r.GetKey(), r.GetEntity(), r.GetToken())
	if err != nil {
		return t, err
	}
	t.cmd.Lease, err = lease(r.GetLeaseMs())
	return t, err
}

func getTarget(r *gridpb.GetRequest) (t target, err error) {
	t.read, t.staleOK = true, r.GetStaleOk()
	t.cmd.Op, t.cmd.ShowToken = keyspace.OpGet, r.GetShowToken()
	if raw := r.GetDigest(); raw != nil {
		d, ok := digest.Decode(raw)
		if !ok || r.GetKey() != nil || r.GetEntity() != nil || len(r.GetNamespace()) != 0 {
			return t, fmt.Errorf("%w: want %d bytes and no namespace, key or entity beside it (got %d bytes)", errBadDigest, digest.Size, len(raw))
		}
		t.cmd.Digest = d
		return t, nil
	}
	t.cmd.Digest, err = recordDigest(string(r.GetNamespace()), r.GetKey(), r.GetEntity())
	return t, err
}

// readOptions is how the shard reads a Get target that is answered by a
// local read rather than inside a proposal.
func (t *target) readOptions() shard.ReadOptions {
	return shard.ReadOptions{StaleOK: t.staleOK, ShowToken: t.cmd.ShowToken}
}

func forgetCommand(r *gridpb.ForgetRequest) (t target, err error) {
	t.cmd.Op = keyspace.OpForget
	t.cmd.Digest, err = recordDigest(string(r.GetNamespace()), r.GetKey(), r.GetEntity())
	return t, err
}

// opTarget validates one batch operation.
func opTarget(op *gridpb.Op) (target, error) {
	switch o := op.GetOp().(type) {
	case *gridpb.Op_Reserve:
		return reserveCommand(o.Reserve)
	case *gridpb.Op_Complete:
		return completeCommand(o.Complete)
	case *gridpb.Op_Fail:
		return failCommand(o.Fail)
	case *gridpb.Op_Release:
		return releaseCommand(o.Release)
	case *gridpb.Op_Extend:
		return extendCommand(o.Extend)
	case *gridpb.Op_Get:
		return getTarget(o.Get)
	case *gridpb.Op_Forget:
		return forgetCommand(o.Forget)
	default:
		return target{}, errNoOperation
	}
}

// toProto renders a keyspace result on the wire.
func toProto(r *keyspace.Result) *gridpb.OpResult {
	out := &gridpb.OpResult{
		Outcome:           gridpb.Outcome(r.Outcome),
		State:             gridpb.State(r.State),
		Token:             r.Token,
		Attempt:           uint32(r.Attempt),
		DeadlineUnixMs:    r.Deadline,
		RetryAfterMs:      r.RetryAfter,
		CompletedAtUnixMs: r.CompletedAt,
		Result:            r.Result,
		NowUnixMs:         r.Now,
		Existed:           r.Existed,
		Replayed:          r.Replayed,
		LeaseExpired:      r.LeaseExpired,
	}
	switch {
	case r.State == keyspace.Absent:
	case r.Cold:
		out.Tier = gridpb.Tier_COLD
	default:
		out.Tier = gridpb.Tier_HOT
	}
	if r.HasFingerprint {
		fp := r.Fingerprint
		out.Fingerprint = &fp
	}
	return out
}
