package keyspace

import (
	"bytes"

	"github.com/l4xg/grid/digest"
)

// Get returns the record of d as of the stamp max(m.Now(), now), without
// changing anything: a settled record past its retention reads as ABSENT.
// The shard supplies now from the leader's clock for linearizable reads.
//
// A Get answers no token unless showToken asks for the operator view: a
// reader is not the holder, and the token of a lease would let it settle
// another consumer's work. This is the one place the rule lives; OpGet
// (a read in log order) and the shard's local reads both come here.
func (m *Machine) Get(d digest.Digest, now int64, showToken bool) Result {
	res := m.get(d, now)
	if !showToken {
		res.Token = 0
	}
	return res
}

func (m *Machine) get(d digest.Digest, now int64) Result {
	now = max(now, m.now)
	rec, had := m.table.Get(d)
	if had && rec.gone(now) {
		had = false
	}
	if had || m.cold == nil {
		return m.view(OutcomeOK, d, rec, had, now)
	}
	// Get may run beside other readers: it reads the cold tier without
	// touching m.coldHit.
	cr, ok := m.cold.Get(d)
	res := Result{Outcome: OutcomeOK, State: Absent, Now: now}
	if !ok || cr.gone(now) {
		return res
	}
	res.State, res.Token, res.Attempt = cr.State(), cr.Token, cr.Attempts()
	res.Deadline, res.CompletedAt = cr.Deadline, cr.CompletedAt()
	res.Result = bytes.Clone(cr.Result)
	res.HasFingerprint, res.Fingerprint = cr.HasFingerprint(), cr.Fingerprint
	res.Cold = true
	return res
}
