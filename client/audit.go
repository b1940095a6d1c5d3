package client

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/l4xg/grid/api/gridpb"
	"github.com/l4xg/grid/digest"
)

// GetDigest reads a record by its digest, as Audit lists it, instead of by
// namespace and key. The grid keeps keys only as digests, so this is how a
// forensic lookup follows up an audit line.
func (c *Client) GetDigest(ctx context.Context, d digest.Digest, opts ...GetOption) (Result, error) {
	r := &gridpb.GetRequest{Digest: d.Bytes()}
	for _, o := range opts {
		o.applyGet(r)
	}
	res, _, err := c.one(ctx, Op{pb: &gridpb.Op{Op: &gridpb.Op_Get{Get: r}}})
	return res, err
}

// AuditQuery selects the records Audit lists: those of Namespace settled
// (COMPLETED or POISONED) at or after Since and before Until (zero: the
// grid's now), at most Limit of them (0: all).
type AuditQuery struct {
	Namespace    string
	Since, Until time.Time
	Limit        int
}

// AuditRecord is one settled record of the cold tier.
type AuditRecord struct {
	Digest      digest.Digest
	Shard       uint32
	State       State
	Token       uint64
	Attempts    int
	CompletedAt time.Time
	// RetainedUntil is the record's retention end: it answers DUPLICATE
	// (or POISONED) until then.
	RetainedUntil  time.Time
	Result         []byte
	Fingerprint    uint64
	HasFingerprint bool
}

// Audit lists the settled records of a namespace and time range from the
// cold tier of the node the client dialled (the first seed), calling fn for each
// (oldest first within a shard) until fn returns an error, which Audit then
// returns. Records settled within the hot window are not in the cold tier
// yet; Get finds them. Keys are digests: a record of another namespace with
// the same 16-bit namespace tag can appear.
func (c *Client) Audit(ctx context.Context, q AuditQuery, fn func(AuditRecord) error) error {
	req := &gridpb.AuditRequest{Namespace: []byte(q.Namespace), SinceUnixMs: unixMs(q.Since), UntilUnixMs: unixMs(q.Until)}
	if q.Limit > 0 {
		req.Limit = uint32(q.Limit)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.seed.rpc.Audit(ctx, req)
	if err != nil {
		return fromRPC(ctx, err)
	}
	for {
		rec, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fromRPC(ctx, err)
		}
		if err := fn(auditFromPB(rec)); err != nil {
			return err
		}
	}
}

func auditFromPB(p *gridpb.AuditRecord) AuditRecord {
	r := AuditRecord{
		Shard:         p.GetShard(),
		State:         State(p.GetState()),
		Token:         p.GetToken(),
		Attempts:      int(p.GetAttempts()),
		CompletedAt:   fromUnixMs(p.GetCompletedAtUnixMs()),
		RetainedUntil: fromUnixMs(p.GetDeadlineUnixMs()),
		Result:        p.GetResult(),
	}
	r.Digest, _ = digest.Decode(p.GetDigest())
	if p.Fingerprint != nil {
		r.Fingerprint, r.HasFingerprint = *p.Fingerprint, true
	}
	return r
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
