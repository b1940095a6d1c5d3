package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/l4xg/grid/chaos/check"
	"github.com/l4xg/grid/client"
)

// Bounds of the checks after the last heal.
const (
	livenessBound = 30 * time.Second
	failoverBar   = 2 * time.Second  // docs/design.md section 8
	restartBar    = 10 * time.Second // the same: a full restart to serving
)

// keyOf finds the key a checker's message names (`key "k"`).
func keyOf(msg string) string {
	_, rest, ok := strings.Cut(msg, `key "`)
	if !ok {
		return ""
	}
	k, _, _ := strings.Cut(rest, `"`)
	return k
}

// verify runs every check on a finished run.
func verify(ctx context.Context, o *outcome, p *procs, inj *injector, l *load, log func(string, ...any)) []result {
	var out []result
	add := func(r result) {
		log("check %s: pass %v: %s", r.Name, r.Pass, r.Detail)
		out = append(out, r)
	}
	if o.cfg.register() {
		add(linearizability(o))
		st := check.Count(o.history)
		r := result{Name: "fencing-tokens", Safety: true, Pass: true, Detail: "tokens strictly increase per key in real time",
			Figures: map[string]any{"grants": st.ByOutcome["reserve ACQUIRED"]}}
		if err := check.FencingTokens(o.history); err != nil {
			r.Pass, r.Detail, r.Key = false, err.Error(), keyOf(err.Error())
		}
		add(r)
		r = result{Name: "single-holder", Safety: true, Pass: true, Detail: "no two holders by their local safe deadlines (client.DefaultLeaseMargin)"}
		if err := check.Holders(o.history, client.DefaultLeaseMargin); err != nil {
			r.Pass, r.Detail, r.Key = false, err.Error(), keyOf(err.Error())
		}
		add(r)
	}
	up := result{Name: "nodes-stay-up", Safety: true, Pass: true, Detail: "no node exited but by the tool's kill or stop"}
	if exits := p.exited(); len(exits) > 0 {
		up.Pass, up.Detail = false, strings.Join(exits, "; ")
	}
	up.Figures = map[string]any{"exits": len(p.exited())}
	add(up)
	conv := result{Name: "convergence", Safety: true, Pass: true, Detail: "every node has the map, every shard its R voters in a committed configuration equal to the map"}
	t0 := time.Now()
	if err := p.awaitStable(ctx, inj.members(), settleBound); err != nil {
		conv.Pass, conv.Detail = false, err.Error()
	}
	conv.Figures = map[string]any{"seconds": time.Since(t0).Seconds()}
	add(conv)
	add(replicasAgree(ctx, inj.members()))
	c, err := client.Dial(ctx, strings.Join(p.addrs()[:o.cfg.Nodes], ","))
	if err != nil {
		add(result{Name: "client", Safety: true, Detail: err.Error()})
		return out
	}
	defer c.Close()
	if o.cfg.app() {
		add(settlesKept(ctx, c, l))
		l.mu.Lock()
		dup := result{Name: "duplicate-effects", Safety: true, Pass: len(l.afterAck) == 0,
			Detail:  "no handler ran on a key after its Complete was acknowledged",
			Figures: map[string]any{"handler_runs": sumValues(l.effects), "keys": len(l.effects), "after_ack": len(l.afterAck)}}
		if !dup.Pass {
			dup.Key = l.afterAck[0]
			dup.Detail = fmt.Sprintf("%d handler runs after an acknowledged Complete, first on key %q", len(l.afterAck), dup.Key)
			dup.Figures["runs"] = l.afterAckRuns
		}
		l.mu.Unlock()
		add(dup)
	}
	add(liveness(ctx, c, o, l))
	add(unavailability(o))
	return out
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// linearizability checks the register history with porcupine; when it
// fails, each key is checked alone to name the failing ones, whose
// visualization is written.
func linearizability(o *outcome) result {
	st := check.Count(o.history)
	r := result{Name: "linearizability", Safety: true, Figures: map[string]any{
		"operations": st.Ops, "keys": st.Keys, "unknown": st.Unknown, "outcomes": st.ByOutcome}}
	v, err := check.Linearizable(o.history, o.cfg.CheckTimeout, "", "")
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	r.Figures["seconds"] = v.Elapsed.Seconds()
	switch v.Result {
	case porcupine.Ok:
		r.Pass, r.Detail = true, fmt.Sprintf("%d operations on %d keys linearizable per key (%d with unknown outcome)", st.Ops, st.Keys, st.Unknown)
		return r
	case porcupine.Unknown:
		r.Detail = fmt.Sprintf("the check timed out after %v: neither a pass nor a failure", o.cfg.CheckTimeout)
		return r
	}
	byKey := map[string][]porcupine.Operation{}
	for _, op := range o.history {
		k := op.Input.(check.Input).Key
		byKey[k] = append(byKey[k], op)
	}
	var bad []string
	for k, ops := range byKey {
		if porcupine.CheckOperationsTimeout(check.Model(), ops, time.Minute) != porcupine.Ok {
			bad = append(bad, k)
		}
	}
	sort.Strings(bad)
	r.Detail = fmt.Sprintf("not linearizable: keys %q", bad)
	if len(bad) > 0 {
		r.Key = bad[0]
		var ops []porcupine.Operation
		for _, k := range bad[:min(len(bad), 5)] {
			ops = append(ops, byKey[k]...)
		}
		if v, err := check.Linearizable(ops, time.Minute, o.cfg.Out, "linearizability"); err == nil && v.Visualization != "" {
			o.viz = filepath.Base(v.Visualization)
		}
	}
	return r
}

// settlesKept checks that every acknowledged Complete of the app workload
// is still there: a Get of each key answers COMPLETED.
func settlesKept(ctx context.Context, c *client.Client, l *load) result {
	l.mu.Lock()
	keys := make([]string, 0, len(l.acked))
	for k := range l.acked {
		keys = append(keys, k)
	}
	l.mu.Unlock()
	sort.Strings(keys)
	r := result{Name: "acknowledged-settles", Safety: true, Figures: map[string]any{"acknowledged": len(keys)}}
	var lost []string
	for i := 0; i < len(keys); i += 500 {
		chunk := keys[i:min(i+500, len(keys))]
		ops := make([]client.Op, len(chunk))
		for j, k := range chunk {
			ops[j] = client.GetOp(appNS, k)
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		res, errs, err := c.Batch(cctx, ops)
		cancel()
		if err != nil {
			r.Detail = fmt.Sprintf("reading the acknowledged keys back: %v", err)
			return r
		}
		for j, k := range chunk {
			if errs[j] != nil || res[j].State != client.StateCompleted {
				lost = append(lost, k)
			}
		}
	}
	r.Figures["lost"] = len(lost)
	if len(lost) > 0 {
		r.Key = lost[0]
		r.Detail = fmt.Sprintf("%d acknowledged Completes lost, first key %q", len(lost), lost[0])
		return r
	}
	r.Pass, r.Detail = true, fmt.Sprintf("all %d acknowledged Completes read back COMPLETED", len(keys))
	return r
}

// liveness checks that after the last heal every key the run touched is
// reservable (then released), or answers DUPLICATE or POISONED, within
// livenessBound.
func liveness(ctx context.Context, c *client.Client, o *outcome, l *load) result {
	type nk struct{ ns, key string }
	var keys []nk
	l.prefixes.Range(func(p, _ any) bool {
		for i := range o.cfg.Keys {
			keys = append(keys, nk{registerNS, fmt.Sprintf("%sk%d", p, i)})
		}
		return true
	})
	l.mu.Lock()
	for k := range l.pending {
		keys = append(keys, nk{appNS, k})
	}
	l.mu.Unlock()
	r := result{Name: "liveness", Safety: true, Figures: map[string]any{"keys": len(keys)}}
	deadline := time.Now().Add(livenessBound)
	var worst time.Duration
	var stuck []string
	for _, k := range keys {
		t0 := time.Now()
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			res, err := c.Reserve(cctx, k.ns, k.key, client.WithLease(time.Second))
			if err == nil && res.Outcome == client.OutcomeAcquired {
				_, err = c.Release(cctx, k.ns, k.key, res.Token)
			}
			cancel()
			if err == nil && res.Outcome != client.OutcomeBusy {
				break
			}
			if time.Now().After(deadline) {
				stuck = append(stuck, k.ns+"/"+k.key)
				break
			}
			wait := 100 * time.Millisecond
			if err == nil {
				wait = max(wait, res.RetryAfter)
			}
			hold(ctx, wait)
		}
		worst = max(worst, time.Since(t0))
	}
	r.Figures["worst_seconds"] = worst.Seconds()
	if len(stuck) > 0 {
		r.Key = stuck[0]
		r.Detail = fmt.Sprintf("%d keys not reservable, DUPLICATE or POISONED within %v of the last heal, first %s", len(stuck), livenessBound, stuck[0])
		return r
	}
	r.Pass = true
	r.Detail = fmt.Sprintf("%d keys reservable, DUPLICATE or POISONED after the last heal (worst %v)", len(keys), worst.Round(time.Millisecond))
	return r
}

// unavailability measures, for each fault, the longest a consumer of the
// app workload was blocked in the fault's window (from its start until the
// cluster converged after it): an operation's duration, or, for one that
// failed, the time until that consumer next succeeded. For a full-cluster
// restart it counts from the moment the nodes were started again: how long
// the cluster took to serve, not how long it was down. It is a measurement
// against docs/design.md section 8's bars (2 s after a fault, 10 s from a
// full restart to serving), not a safety check. A block is counted until
// the next fault starts at most: what follows is that fault's.
func unavailability(o *outcome) result {
	r := result{Name: "unavailability", Detail: "no app workload"}
	if !o.cfg.app() {
		r.Pass = true
		return r
	}
	byWorker := map[int][]sample{}
	for _, s := range o.samples {
		byWorker[s.Worker] = append(byWorker[s.Worker], s)
	}
	// blocked is the longest block of an operation started in [from, to],
	// counted from since if it began earlier, and until cut at most.
	blocked := func(from, to, since, cut time.Duration) time.Duration {
		var worst time.Duration
		for _, ss := range byWorker {
			for i, s := range ss {
				if s.Start < from || s.Start > to {
					continue
				}
				end := s.End
				if s.Err != "" {
					end = s.Start
					for _, n := range ss[i+1:] {
						if n.Err == "" {
							end = n.End
							break
						}
					}
				}
				worst = max(worst, min(end, cut)-max(s.Start, since))
			}
		}
		return worst
	}
	perKind := map[string][]time.Duration{}
	for i := range o.faults {
		f := &o.faults[i]
		// A block that runs into the next fault is that fault's from its
		// start on: a Reserve sent as one full restart settled and
		// answered after the next one is not the first's.
		cut := time.Duration(math.MaxInt64)
		if i+1 < len(o.faults) {
			cut = o.faults[i+1].Start
		}
		f.Unavailable = blocked(f.Start, f.End+f.Settled, max(f.Start, f.Restarted), cut)
		perKind[f.Kind] = append(perKind[f.Kind], f.Unavailable)
	}
	figs := map[string]any{}
	r.Pass = true
	var parts []string
	kinds := make([]string, 0, len(perKind))
	for k := range perKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		ds := perKind[k]
		slices.Sort(ds)
		med, worst := ds[len(ds)/2], ds[len(ds)-1]
		figs[k] = map[string]any{"faults": len(ds), "median_seconds": med.Seconds(), "max_seconds": worst.Seconds()}
		parts = append(parts, fmt.Sprintf("%s median %v max %v", k, med.Round(time.Millisecond), worst.Round(time.Millisecond)))
		if worst > barOf(k) {
			r.Pass = false
		}
	}
	r.Figures = figs
	r.Detail = fmt.Sprintf("longest a consumer was blocked per fault, against %v (a restart: from the nodes' start, against %v): %s",
		failoverBar, restartBar, strings.Join(parts, "; "))
	if len(parts) == 0 {
		r.Detail = "no faults"
	}
	return r
}

// barOf is the unavailability bar of a kind of fault.
func barOf(kind string) time.Duration {
	if kind == faultRestart {
		return restartBar
	}
	return failoverBar
}
