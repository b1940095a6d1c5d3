package keyspace

import (
	"fmt"

	"github.com/l4xg/grid/digest"
)

// TierPolicy says when settled records leave the hot table for the cold
// tier. The leader writes its policy into every tick entry, so all replicas
// demote the same records at the same index.
type TierPolicy struct {
	// HotWindow is how long (ms) a COMPLETED or POISONED record stays hot
	// after it was settled.
	HotWindow int64
	// HotMaxBytes is the hot tier's budget (see Machine.HotLiveBytes); above
	// it, settled records are demoted early, whatever their age. 0: none.
	// Records still PROCESSING or FAILED are never demoted, so the budget is
	// soft: it cannot push out work in flight.
	HotMaxBytes int64
}

// DefaultHotWindow is the hot window (ms) of a machine no tick has set a
// policy for: 24 hours, the producer retry window of docs/design.md section 4.
const DefaultHotWindow = 24 * 60 * 60 * 1000

// sideEntryBytes is a rough cost of one fingerprint, pending entity or
// request id entry, for the hot tier's accounting.
const sideEntryBytes = 48

// Validate refuses a policy no leader should send.
func (p TierPolicy) Validate() error {
	if p.HotWindow < 0 || p.HotMaxBytes < 0 {
		return fmt.Errorf("%w: negative tier policy %+v", ErrCorruptEntry, p)
	}
	return nil
}

// demotable reports whether the sweep should move r to the cold tier.
func (m *Machine) demotable(r Record, now int64, over bool) bool {
	return m.cold != nil && r.settled() && (over || r.CompletedAt()+m.policy.HotWindow <= now)
}

// demote moves d's settled record r, with its side data, to the cold tier.
func (m *Machine) demote(d digest.Digest, r Record) {
	cr := ColdRecord{Record: r}
	if r.has(flagFingerprint) {
		cr.Fingerprint, _ = m.fingerprints.get(d)
	}
	if r.has(flagResult) {
		cr.Result, _ = m.results.get(d)
	}
	m.cold.Put(d, &cr)
	m.dropSide(d, r)
	m.stats.Demoted++
}

// OverBudget reports whether the hot tier holds more than the policy allows:
// the leader then ticks more often, so demotion catches up.
func (m *Machine) OverBudget() bool { return m.cold != nil && m.overBudget() }

// overBudget reports whether the hot tier holds more than the policy allows.
func (m *Machine) overBudget() bool {
	return m.policy.HotMaxBytes > 0 && m.HotLiveBytes() > m.policy.HotMaxBytes
}
