package keyspace

// Get returns the record of d as of the stamp max(m.Now(), now), without
// changing anything: a settled record past its retention reads as ABSENT.
// The shard supplies now from the leader's clock for linearizable reads.
func (m *Machine) Get(d Digest, now int64) Result {
	now = max(now, m.now)
	rec, had := m.table.Get(d)
	if had && rec.gone(now) {
		had = false
	}
	return m.view(OutcomeOK, d, rec, had, now)
}
