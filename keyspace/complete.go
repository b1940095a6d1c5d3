package keyspace

// complete settles a held lease as COMPLETED (docs/design.md section 2,
// Complete). Repeating it with the same token after success answers OK again.
func (m *Machine) complete(c *Command, now int64) Result {
	d, rec, had := m.held(c, now)
	switch {
	case had && rec.Token == c.Token && rec.State() == Processing:
		done := settle(rec, Completed, now, c.Retention)
		m.dropRequestID(d, &done)
		if ref, ok := m.dropPending(d, &done); ok {
			m.raiseEntity(ref, done.Deadline)
		}
		m.setResult(d, &done, c.Result)
		m.put(d, rec, true, done)
		return m.view(OutcomeOK, d, done, true, now)
	case had && rec.Token == c.Token && rec.State() == Completed:
		res := m.view(OutcomeOK, d, rec, true, now)
		res.Repeated = true
		return res
	default:
		return m.view(OutcomeLeaseLost, d, rec, had, now)
	}
}

// raiseEntity lifts an entity's committed version to at least ref.version,
// keeping it as long as the longest-retained record that raised it.
func (m *Machine) raiseEntity(ref entityRef, deadline int64) {
	old, ok := m.entities.get(ref.entity)
	ev := entityVersion{version: ref.version, deadline: deadline}
	if ok && old.deadline > m.now {
		ev.version = max(old.version, ref.version)
		ev.deadline = max(old.deadline, deadline)
	}
	if !ok || ev.deadline != old.deadline {
		m.expiring.push(ev.deadline, ref.entity)
	}
	m.entities.set(ref.entity, ev)
}
