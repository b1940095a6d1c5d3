package keyspace

// forget removes a record whatever its state (operator action to force
// reprocessing). Result.Existed tells whether there was one. It does not
// lower an entity's committed version: a forgotten entity-versioned message
// whose version is at or below it still answers STALE, as every older
// message of that entity does.
func (m *Machine) forget(c *Command, now int64) Result {
	d := c.Digest
	rec, had := m.lookup(d, now)
	if had {
		m.remove(d, rec)
		m.stats.Forgotten++
	}
	res := m.view(OutcomeOK, d, Record{}, false, now)
	res.Existed = had
	return res
}
