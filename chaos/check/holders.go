package check

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/client"
)

// hold is the time a caller trusted a lease: from the answer that granted
// it to its local safe deadline, or to the caller's settle if that came
// first. Times are the history's (ns from the recorder's start).
type hold struct {
	op         porcupine.Operation
	token      uint64
	from, till int64
}

// Holders checks docs/design.md section 3's promise to a holder that trusts its
// lease only until its local safe deadline: no two callers hold one key at
// once. A caller's hold of a lease runs from the answer that granted it
// (a Reserve answered ACQUIRED) until the call's start plus the lease the
// answer gives (Deadline - Now) minus margin(lease), moved on by each of
// its Extends answered OK (from that Extend's start), and ends at its
// first settle of the token (Complete, Fail or Release, whatever became
// of it) or at a Forget of the key by anyone (an operator's override),
// unless that Forget returned before the grant was called. Two holds of
// one key that overlap are reported with both
// operations. The history's times are the caller's clock, which is what
// a holder trusts.
func Holders(ops []porcupine.Operation, margin func(lease time.Duration) time.Duration) error {
	type lane struct {
		key    string
		client int
	}
	byLane := map[lane][]porcupine.Operation{}
	forgets := map[string][]porcupine.Operation{}
	for _, op := range ops {
		in := op.Input.(Input)
		byLane[lane{in.Key, op.ClientId}] = append(byLane[lane{in.Key, op.ClientId}], op)
		if in.Kind == KindForget {
			forgets[in.Key] = append(forgets[in.Key], op)
		}
	}
	holds := map[string][]hold{}
	safeEnd := func(op porcupine.Operation) int64 {
		out := op.Output.(Output)
		lease := time.Duration(out.Deadline-out.Now) * time.Millisecond
		return op.Call + int64(lease-margin(lease))
	}
	for l, lops := range byLane {
		slices.SortFunc(lops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		for i, op := range lops {
			in, out := op.Input.(Input), op.Output.(Output)
			if in.Kind != KindReserve || out.Unknown || out.Outcome != client.OutcomeAcquired {
				continue
			}
			h := hold{op: op, token: out.Token, from: op.Return, till: safeEnd(op)}
			for _, next := range lops[i+1:] {
				nin, nout := next.Input.(Input), next.Output.(Output)
				if nin.Token != out.Token {
					continue
				}
				if nin.Kind == KindExtend {
					if !nout.Unknown && nout.Outcome == client.OutcomeOK {
						h.till = max(h.till, safeEnd(next))
					}
					continue
				}
				if nin.Kind == KindComplete || nin.Kind == KindFail || nin.Kind == KindRelease {
					h.till = min(h.till, next.Call)
					break
				}
			}
			for _, f := range forgets[l.key] {
				if f.Return > op.Call {
					h.till = min(h.till, max(f.Call, h.from))
				}
			}
			if h.till > h.from {
				holds[l.key] = append(holds[l.key], h)
			}
		}
	}
	for key, hs := range holds {
		slices.SortFunc(hs, func(a, b hold) int { return cmp.Compare(a.from, b.from) })
		for i := 1; i < len(hs); i++ {
			// Sorted by start: an overlap with any earlier hold shows
			// with the one that ends last.
			last := slices.MaxFunc(hs[:i], func(a, b hold) int { return cmp.Compare(a.till, b.till) })
			if hs[i].from < last.till && hs[i].token != last.token {
				return fmt.Errorf("check: key %q held twice: client %d (token %d) trusted its lease until %v, client %d (token %d) held it from %v",
					key, last.op.ClientId, last.token, time.Duration(last.till), hs[i].op.ClientId, hs[i].token, time.Duration(hs[i].from))
			}
		}
	}
	return nil
}
