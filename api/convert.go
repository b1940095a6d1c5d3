package api

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/keyspace"
)

// target is a validated operation: a command for the log, or a read.
type target struct {
	read    bool
	staleOK bool
	cmd     keyspace.Command
}

func digest(ns string, key, entity []byte) (keyspace.Digest, error) {
	if err := keyspace.ValidateNamespace(ns); err != nil {
		return keyspace.Digest{}, err
	}
	if err := keyspace.ValidateKey(key); err != nil {
		return keyspace.Digest{}, err
	}
	if err := keyspace.ValidateEntity(entity); err != nil {
		return keyspace.Digest{}, err
	}
	return keyspace.RecordDigest(ns, key, entity), nil
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
	d := orDefault(ms, keyspace.DefaultLease)
	return d.Milliseconds(), keyspace.ValidateLease(d)
}

func retention(ms int64, def time.Duration) (int64, error) {
	d := orDefault(ms, def)
	return d.Milliseconds(), keyspace.ValidateRetention(d)
}

func reserveCommand(r *gridpb.ReserveRequest) (t target, err error) {
	c := &t.cmd
	c.Op = keyspace.OpReserve
	if c.Digest, err = digest(string(r.GetNamespace()), r.GetKey(), r.GetEntity()); err != nil {
		return t, err
	}
	if c.Lease, err = lease(r.GetLeaseMs()); err != nil {
		return t, err
	}
	if c.Retention, err = retention(r.GetPoisonRetentionMs(), keyspace.DefaultPoisonRetention); err != nil {
		return t, fmt.Errorf("poison_retention: %w", err)
	}
	attempts := int(r.GetMaxAttempts())
	if attempts == 0 {
		attempts = keyspace.DefaultMaxAttempts
	}
	if err = keyspace.ValidateMaxAttempts(attempts); err != nil {
		return t, err
	}
	c.MaxAttempts = uint8(attempts)
	if r.Fingerprint != nil {
		c.HasFingerprint, c.Fingerprint = true, r.GetFingerprint()
	}
	if len(r.GetEntity()) > 0 {
		c.HasEntity, c.Entity, c.Version = true, keyspace.EntityDigest(string(r.GetNamespace()), r.GetEntity()), r.GetVersion()
	}
	return t, nil
}

func settleCommand(op keyspace.Op, ns string, key, entity []byte, token uint64) (t target, err error) {
	t.cmd.Op = op
	if t.cmd.Digest, err = digest(ns, key, entity); err != nil {
		return t, err
	}
	t.cmd.Token = token
	return t, keyspace.ValidateToken(token)
}

func completeCommand(r *gridpb.CompleteRequest) (target, error) {
	t, err := settleCommand(keyspace.OpComplete, string(r.GetNamespace()), r.GetKey(), r.GetEntity(), r.GetToken())
	if err != nil {
		return t, err
	}
	if t.cmd.Retention, err = retention(r.GetRetentionMs(), keyspace.DefaultRetention); err != nil {
		return t, err
	}
	if err = keyspace.ValidateResult(r.GetResult()); err != nil {
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
	if t.cmd.Retention, err = retention(r.GetRetentionMs(), keyspace.DefaultPoisonRetention); err != nil {
		return t, err
	}
	if r.RetryAfterMs != nil {
		d := orDefault(r.GetRetryAfterMs(), 0)
		if err = keyspace.ValidateRetryAfter(d); err != nil {
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
	if raw := r.GetDigest(); raw != nil {
		if len(raw) != 16 || r.GetKey() != nil || r.GetEntity() != nil || len(r.GetNamespace()) != 0 {
			return t, fmt.Errorf("%w: want 16 bytes and no namespace, key or entity beside it (got %d bytes)", errBadDigest, len(raw))
		}
		t.cmd.Digest = keyspace.Digest{Hi: binary.BigEndian.Uint64(raw), Lo: binary.BigEndian.Uint64(raw[8:])}
		return t, nil
	}
	t.cmd.Digest, err = digest(string(r.GetNamespace()), r.GetKey(), r.GetEntity())
	return t, err
}

// digestBytes renders a digest on the wire: Hi then Lo, big-endian, the
// order of its hex form.
func digestBytes(d keyspace.Digest) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), d.Hi)
	return binary.BigEndian.AppendUint64(b, d.Lo)
}

func forgetCommand(r *gridpb.ForgetRequest) (t target, err error) {
	t.cmd.Op = keyspace.OpForget
	t.cmd.Digest, err = digest(string(r.GetNamespace()), r.GetKey(), r.GetEntity())
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
