package check

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/client"
)

// FencingTokens is a pass over a history, apart from the model, for the
// fencing rule of docs/design.md section 3: of two leases granted on one key
// (ACQUIRED), the one whose Reserve returned before the other was called has
// the smaller token. It holds whatever linearization porcupine picks, so a
// violation is reported with the two operations, which is easier to read than
// a visualization. The model checks the same rule and more (it also orders
// concurrent grants and grants whose answers were lost).
func FencingTokens(ops []porcupine.Operation) error {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind == KindReserve && !out.Unknown && out.Outcome == client.OutcomeAcquired {
			byKey[in.Key] = append(byKey[in.Key], op)
		}
	}
	for key, grants := range byKey {
		byCall := slices.Clone(grants)
		slices.SortFunc(byCall, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		byReturn := grants
		slices.SortFunc(byReturn, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
		// Sweep: for each grant, the largest token of the grants that
		// returned before it was called.
		var best *porcupine.Operation
		j := 0
		for i := range byCall {
			for j < len(byReturn) && byReturn[j].Return < byCall[i].Call {
				if best == nil || byReturn[j].Output.(Output).Token > best.Output.(Output).Token {
					best = &byReturn[j]
				}
				j++
			}
			if best != nil && byCall[i].Output.(Output).Token <= best.Output.(Output).Token {
				return fmt.Errorf("check: key %q: token %d granted after token %d (client %d, then client %d): fencing tokens must increase",
					key, byCall[i].Output.(Output).Token, best.Output.(Output).Token, best.ClientId, byCall[i].ClientId)
			}
		}
	}
	return nil
}
