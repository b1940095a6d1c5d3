package keyspace

// release gives a held lease back without counting an attempt: the record
// becomes ABSENT. Releasing a key nobody holds is a no-op that answers OK, so
// a retried Release succeeds; a key held under another token is LEASE_LOST.
func (m *Machine) release(c *Command, now int64) Result {
	d, rec, had := m.held(c, now)
	switch {
	case !had:
		return m.view(OutcomeOK, d, rec, false, now)
	case rec.Token == c.Token && rec.State() == Processing:
		m.remove(d, rec)
		return m.view(OutcomeOK, d, Record{}, false, now)
	default:
		return m.view(OutcomeLeaseLost, d, rec, true, now)
	}
}
