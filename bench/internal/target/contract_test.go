package target

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/l4xg/grid/bench/internal/workload"
)

const (
	testLease     = 20 * time.Second
	testRetention = time.Hour
)

func testPrefix() string { return fmt.Sprintf("benchtest-%08x:", rand.Uint32()) }

// contract checks the operations a target claims, against a real server.
func contract(t *testing.T, tg workload.Target, prefix string) {
	t.Helper()
	ctx := context.Background()
	key := prefix + "k1"
	r, err := tg.Reserve(ctx, key, testLease)
	if err != nil || !r.Acquired || r.Token == 0 || r.Key != key {
		t.Fatalf("reserve of a new key: %+v, %v", r, err)
	}
	if again, err := tg.Reserve(ctx, key, testLease); err != nil || again.Acquired {
		t.Fatalf("second reserve while held: %+v, %v: want refused", again, err)
	}
	if err := tg.Complete(ctx, r, testRetention); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if again, err := tg.Reserve(ctx, key, testLease); err != nil || again.Acquired {
		t.Fatalf("reserve after complete: %+v, %v: want refused", again, err)
	}
	rs, err := tg.ReserveBatch(ctx, []string{prefix + "b1", key, prefix + "b2"}, testLease)
	if err != nil || len(rs) != 3 {
		t.Fatalf("batch: %v, %v", rs, err)
	}
	if !rs[0].Acquired || rs[1].Acquired || !rs[2].Acquired || rs[2].Key != prefix+"b2" {
		t.Fatalf("batch answers %+v: want acquired, refused, acquired in order", rs)
	}
	m, err := tg.Memory(ctx)
	if err != nil || m.Bytes <= 0 || m.Source == "" {
		t.Fatalf("memory %+v, %v", m, err)
	}

	cfg := workload.Config{Concurrency: 3, Duration: time.Minute, MaxCalls: 30,
		Lease: testLease, Retention: testRetention, DupRatio: 0.5, BatchSize: 150,
		Keys: 2500, KeyShape: workload.ShapeComposite, Seed: 7}
	for _, name := range workload.Names {
		cfg.Prefix = prefix + name + ":" // keys restart per run: a prefix per run keeps them new
		res, err := workload.Run(ctx, name, tg, cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Errors != 0 {
			t.Fatalf("%s: %d errors: %v", name, res.Errors, res.ErrorTexts)
		}
		wantOps := map[string]int64{workload.Batch: 30 * 150, workload.Fill: 2500}[name]
		if wantOps == 0 {
			wantOps = 30
		}
		if res.Ops != wantOps {
			t.Fatalf("%s: %d ops, want %d", name, res.Ops, wantOps)
		}
		if name == workload.Lifecycle && res.DupSuppressed != 30 {
			t.Fatalf("lifecycle: %d duplicates suppressed, want 30", res.DupSuppressed)
		}
		if name == workload.Fill && (res.Fill == nil || res.Fill.Keys != 2500) {
			t.Fatalf("fill: %+v", res.Fill)
		}
	}
}
