package api

import (
	"fmt"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
	"github.com/l4xg/grid/keyspace"
)

// Audit streams the COMPLETED and POISONED records of a namespace settled in
// a time range from the cold tiers of the local shards (docs/design.md
// section 4, the forensic path). Records still in the hot tier are not
// listed: they settled within the hot window, and Get finds them.
//
// In a cluster every replica of a shard holds the same records, so a node
// lists only the shards its replica leads, once each across the cluster at
// any moment. An audit of the whole cluster must ask every node and merge
// the streams (TODO: `gridnode audit` asks the node it is given only; a
// shard whose leadership moves during the audit can be listed twice or
// missed).
func (s *Server) Audit(r *gridpb.AuditRequest, stream gridpb.Grid_AuditServer) error {
	if err := digest.ValidateNamespace(string(r.GetNamespace())); err != nil {
		return toStatus(err)
	}
	since, until := r.GetSinceUnixMs(), r.GetUntilUnixMs()
	if until == 0 {
		until = s.opts.Clock().UnixMilli()
	}
	if since < 0 || until < since {
		return toStatus(fmt.Errorf("%w: since %d, until %d", errAuditRange, since, until))
	}
	ctx := stream.Context()
	limit, sent := r.GetLimit(), uint32(0)
	led := s.ledShards()
	var sendErr error
	err := s.host.Audit(digest.NamespaceTag(string(r.GetNamespace())), since, until, func(shard uint32, d digest.Digest, rec keyspace.ColdRecord) bool {
		if led != nil && !led[shard] {
			return true // another node lists this shard
		}
		out := &gridpb.AuditRecord{
			Digest:            d.Bytes(),
			Shard:             shard,
			State:             gridpb.State(rec.State()),
			Token:             rec.Token,
			Attempts:          uint32(rec.Attempts()),
			CompletedAtUnixMs: rec.CompletedAt(),
			DeadlineUnixMs:    rec.Deadline,
			Result:            rec.Result,
		}
		if rec.HasFingerprint() {
			fp := rec.Fingerprint
			out.Fingerprint = &fp
		}
		if sendErr = stream.Send(out); sendErr != nil || ctx.Err() != nil {
			return false
		}
		sent++
		return limit == 0 || sent < limit
	})
	if sendErr != nil {
		return sendErr
	}
	if err != nil {
		return toStatus(err)
	}
	return ctx.Err()
}

// ledShards is the set of shards whose local replica leads, in a cluster;
// nil on a standalone node, which lists every shard.
func (s *Server) ledShards() map[uint32]bool {
	if s.opts.Cluster == nil {
		return nil
	}
	led := make(map[uint32]bool)
	for _, sh := range s.host.Replicas() {
		if sh.IsLeader() {
			led[uint32(sh.ID())] = true
		}
	}
	return led
}
