package keyspace

import (
	"container/heap"

	"github.com/l4xg/grid/digest"
)

// Expiry and demotion are driven by stamped time only. A record is logically
// ABSENT as soon as a stamp passes its retention end (every lookup checks),
// so reclaiming its memory is bookkeeping that may lag. Each Tick entry:
//   - sweeps a bounded window of the hot table from a cursor, reclaiming gone
//     records and demoting settled ones past the hot window to the cold tier
//     (a wider window, and any settled record, while over the hot budget),
//     at most demotionsPerTick of them so one tick never holds the apply
//     loop for long;
//   - purges a bounded number of cold records past their retention;
//   - drops a bounded number of entity versions past their deadline.
//
// Since ticks are log entries, every replica does the same at the same index.
const (
	sweepSlotsPerTick     = 4096
	overBudgetSweepFactor = 16 // window multiplier while over the hot budget
	demotionsPerTick      = 2048
	purgePerTick          = 4096
	entityDropsPerTick    = 4096
)

func (m *Machine) sweep(now int64) {
	m.ticks++
	window := sweepSlotsPerTick
	over := m.overBudget()
	if over {
		window *= overBudgetSweepFactor
	}
	demotions := 0
	m.cursor = m.table.Sweep(m.cursor, window, func(d digest.Digest, r Record) bool {
		if r.gone(now) {
			m.dropSide(d, r)
			m.stats.Reclaimed++
			return true
		}
		if demotions == demotionsPerTick || !m.demotable(r, now, over) {
			return false
		}
		demotions++
		if r.CompletedAt()+m.policy.HotWindow > now {
			m.stats.Evicted++
		}
		m.demote(d, r)
		over = over && m.overBudget()
		return true
	})
	if m.cold != nil {
		m.stats.Purged += uint64(m.cold.Purge(now, purgePerTick))
	}
	m.dropEntities(now)
}

// dropEntities forgets entity versions past their deadline, a bounded number
// per tick, in deadline order.
func (m *Machine) dropEntities(now int64) {
	for n := 0; n < entityDropsPerTick && m.expiring.Len() > 0; n++ {
		top := m.expiring.items[0]
		if top.deadline > now {
			return
		}
		heap.Pop(&m.expiring)
		// The heap may hold an older deadline of an entity raised since.
		if ev, ok := m.entities.get(top.entity); ok && ev.deadline == top.deadline {
			m.entities.del(top.entity)
		}
	}
}

// entityHeap orders entity deadlines, earliest first. It is rebuilt from the
// entity map on restore, so it is not part of the snapshot.
type entityHeap struct{ items []entityDeadline }

type entityDeadline struct {
	deadline int64
	entity   digest.Digest
}

func (h *entityHeap) Len() int { return len(h.items) }
func (h *entityHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	return a.deadline < b.deadline || a.deadline == b.deadline &&
		(a.entity.Hi < b.entity.Hi || a.entity.Hi == b.entity.Hi && a.entity.Lo < b.entity.Lo)
}
func (h *entityHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *entityHeap) Push(x any)    { h.items = append(h.items, x.(entityDeadline)) }
func (h *entityHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

func (h *entityHeap) push(deadline int64, e digest.Digest) {
	heap.Push(h, entityDeadline{deadline: deadline, entity: e})
}
