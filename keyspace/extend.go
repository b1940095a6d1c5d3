package keyspace

// extend renews a held lease to now + lease. A lease past its deadline that
// nobody took over can still be extended, as it can still be completed.
func (m *Machine) extend(c *Command, now int64) Result {
	d, rec, had := m.held(c, now)
	if !had || rec.Token != c.Token || rec.State() != Processing {
		return m.view(OutcomeLeaseLost, d, rec, had, now)
	}
	next := rec
	next.Deadline = now + c.Lease
	m.put(d, rec, true, next)
	return m.view(OutcomeOK, d, next, true, now)
}
