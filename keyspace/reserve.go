package keyspace

import "github.com/l4xg/grid/digest"

// reserve implements the Reserve table of docs/design.md section 2, with the
// replay of section 3 first: a Reserve that carries the request id of the
// lease in force on its key is a resend of the reserve that was granted it.
func (m *Machine) reserve(c *Command, now int64, token uint64) Result {
	d := c.Digest
	rec, had := m.lookup(d, now)
	if had && m.replays(c, d, rec, now) {
		res := m.view(OutcomeAcquired, d, rec, true, now)
		res.Replayed = true
		return res
	}
	if c.HasEntity {
		if ev, ok := m.entities.get(c.Entity); ok && ev.deadline > now && c.Version <= ev.version {
			return m.view(OutcomeStale, d, rec, had, now)
		}
	}
	if had && c.HasFingerprint && rec.has(flagFingerprint) && m.fingerprint(d) != c.Fingerprint {
		return m.view(OutcomeMismatch, d, rec, had, now)
	}
	if !had {
		return m.grant(c, now, token, Record{}, false)
	}
	switch rec.State() {
	case Completed:
		return m.view(OutcomeDuplicate, d, rec, had, now)
	case Poisoned:
		return m.view(OutcomePoisoned, d, rec, had, now)
	}
	// PROCESSING or FAILED.
	if rec.Deadline > now {
		res := m.view(OutcomeBusy, d, rec, had, now)
		res.RetryAfter = rec.Deadline - now
		return res
	}
	// A zombie lease or an elapsed retry delay: the previous attempt counts.
	expired := rec.State() == Processing
	if expired {
		m.stats.LeasesExpired++
	}
	var res Result
	if rec.Attempts() >= c.MaxAttempts {
		p := settle(rec, Poisoned, now, c.Retention)
		// The poisoning is this command's doing: it takes this command's
		// token, so the crashed holder's late settles answer LEASE_LOST.
		p.Token = token
		m.dropPending(d, &p)
		m.dropRequestID(d, &p)
		m.put(d, rec, true, p)
		res = m.view(OutcomePoisoned, d, p, true, now)
	} else {
		res = m.grant(c, now, token, rec, true)
	}
	res.TookOver, res.LeaseExpired = true, expired
	return res
}

// replays reports whether c is a resend of the reserve that holds d's lease
// (the Raft dissertation's client sessions, section 6.3, scoped to one
// lease): rec is PROCESSING within its lease and keeps the request id c
// carries. The answer is then that grant again, whatever else has happened
// since: the entity's version may have been raised by another of its keys
// (the grant passed the STALE check when it was made), but a fingerprint that
// differs is not the same message, so that reserve goes on to MISMATCH. A
// lease past its deadline is not replayed: the resend takes it over like any
// reserve would, with a new token.
func (m *Machine) replays(c *Command, d digest.Digest, rec Record, now int64) bool {
	if !c.HasRequestID || !rec.has(flagRequestID) || rec.State() != Processing || rec.Deadline <= now {
		return false
	}
	if id, _ := m.requestIDs.get(d); id != c.RequestID {
		return false
	}
	return !(c.HasFingerprint && rec.has(flagFingerprint) && m.fingerprint(d) != c.Fingerprint)
}

// grant hands a new lease on d to the caller: PROCESSING, next attempt.
func (m *Machine) grant(c *Command, now int64, token uint64, old Record, had bool) Result {
	d := c.Digest
	attempts := uint8(1)
	flags := uint8(0)
	if had {
		attempts = old.Attempts() + 1
		flags = old.flags() &^ (flagResult | flagRequestID)
		if old.has(flagResult) {
			m.dropResult(d)
		}
		if old.has(flagRequestID) {
			m.requestIDs.del(d)
		}
	}
	r := Record{Token: token, Deadline: now + c.Lease, Meta: makeMeta(Processing, flags, attempts, uint64(c.MaxAttempts))}
	if c.HasFingerprint && !r.has(flagFingerprint) {
		m.fingerprints.set(d, c.Fingerprint)
		r.setFlag(flagFingerprint, true)
	}
	if c.HasEntity {
		m.pending.set(d, entityRef{entity: c.Entity, version: c.Version})
		r.setFlag(flagEntity, true)
	}
	if c.HasRequestID {
		m.requestIDs.set(d, c.RequestID)
		r.setFlag(flagRequestID, true)
	}
	m.put(d, old, had, r)
	return m.view(OutcomeAcquired, d, r, true, now)
}
