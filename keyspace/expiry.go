package keyspace

// Expiry is driven by stamped time only. A record is logically ABSENT as soon
// as a stamp passes its retention end (every lookup checks), so reclaiming its
// memory is bookkeeping that may lag: each Tick entry sweeps a bounded window
// of the table from a cursor, and the entity versions are swept whole every
// entitySweepEvery ticks. Since ticks are log entries, every replica reclaims
// the same records at the same index.
const (
	sweepSlotsPerTick = 4096
	entitySweepEvery  = 64
)

func (m *Machine) sweep(now int64) {
	m.ticks++
	m.cursor = m.table.Sweep(m.cursor, sweepSlotsPerTick, func(d Digest, r Record) bool {
		if !r.gone(now) {
			return false
		}
		m.dropSide(d, r)
		m.stats.Reclaimed++
		return true
	})
	if m.ticks%entitySweepEvery == 0 {
		for e, ev := range m.entities {
			if ev.deadline <= now {
				delete(m.entities, e)
			}
		}
	}
}
