package keyspace

// extend renews a held lease to max(its deadline, now + lease): a heartbeat
// never shortens a lease, so a holder that timed its work by the deadline it
// was given cannot lose the lease early to a shorter Extend. The answer's
// deadline is the lease's real one. A lease past its deadline that nobody
// took over can still be extended, as it can still be completed.
func (m *Machine) extend(c *Command, now int64) Result {
	d, rec, had := m.held(c, now)
	if !had || rec.Token != c.Token || rec.State() != Processing {
		return m.view(OutcomeLeaseLost, d, rec, had, now)
	}
	next := rec
	next.Deadline = max(rec.Deadline, now+c.Lease)
	m.put(d, rec, true, next)
	return m.view(OutcomeOK, d, next, true, now)
}
