package sqlfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/l4xg/grid/client/sqlfence"
)

// A MariaDB DSN with clientFoundRows=true makes the server count a row
// an upsert left unchanged as affected, as it counts an inserted one. The
// fence must not read that as "applied": the same holder again would make
// its effect twice, and a holder a newer one superseded would make it at
// all.
func TestApplyOnceAndFenceWithClientFoundRows(t *testing.T) {
	for _, d := range dialects() {
		if d.name != "mariadb" {
			continue
		}
		d = foundRows(t, d)
		t.Run("superseded", func(t *testing.T) {
			db, f, ledger := setup(t, d)
			ctx := context.Background()
			if applied, err := pay(ctx, d, db, f, ledger, "p-2", 10); err != nil || !applied {
				t.Fatalf("first apply = %v, %v; want applied", applied, err)
			}
			if applied, err := pay(ctx, d, db, f, ledger, "p-2", 7); !errors.Is(err, sqlfence.ErrSuperseded) {
				t.Errorf("an older holder = %v, %v; want ErrSuperseded", applied, err)
			}
			if n := effects(t, d, db, ledger, "p-2"); n != 1 {
				t.Errorf("payment applied %d times", n)
			}
		})
		t.Run("sequence", func(t *testing.T) { testApplyOnceAndFence(t, d) })
	}
}

// foundRows is MariaDB dialect d on a DSN with clientFoundRows=true.
func foundRows(t *testing.T, d dialect) dialect {
	t.Helper()
	dsn := d.dsn
	if v := os.Getenv(d.env); v != "" {
		dsn = v
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientFoundRows = true
	d.name += "-found-rows"
	d.dsn = cfg.FormatDSN()
	d.env = "" // setup reads the DSN from d.dsn, not the environment
	return d
}

// Holders of one key with different tokens racing for it, the row not
// there yet: the effect is made at most once, by the one holder told
// applied, under every dialect and both MariaDB counting modes. A holder
// may fail (a deadlock the database broke), never double the effect.
func TestConcurrentHoldersApplyOnce(t *testing.T) {
	var ds []dialect
	for _, d := range dialects() {
		ds = append(ds, d)
		if d.name == "mariadb" {
			ds = append(ds, foundRows(t, d))
		}
	}
	for _, d := range ds {
		t.Run(d.name, func(t *testing.T) {
			db, f, ledger := setup(t, d)
			ctx := context.Background()
			for round := range 20 {
				key := fmt.Sprintf("p-race-%d", round)
				const holders = 6
				var wg sync.WaitGroup
				applied := make(chan uint64, holders)
				for i := range holders {
					wg.Go(func() {
						token := uint64(round*holders + i + 1)
						ok, err := pay(ctx, d, db, f, ledger, key, token)
						if err == nil && ok {
							applied <- token
						}
						if err != nil && !errors.Is(err, sqlfence.ErrSuperseded) {
							t.Logf("%s token %d: %v", key, token, err)
						}
					})
				}
				wg.Wait()
				close(applied)
				var tokens []uint64
				for tok := range applied {
					tokens = append(tokens, tok)
				}
				if n := effects(t, d, db, ledger, key); n > 1 || n != len(tokens) {
					t.Fatalf("%s: %d effects, holders told applied: %v; want at most one, and one per applied", key, n, tokens)
				}
			}
		})
	}
}

// Tokens above 2^53 differ in bits a float64 does not hold: raising one
// to the next must still raise it, and fence the older holder out, in
// both MariaDB counting modes.
func TestRaiseLargeToken(t *testing.T) {
	var ds []dialect
	for _, d := range dialects() {
		ds = append(ds, d)
		if d.name == "mariadb" {
			ds = append(ds, foundRows(t, d))
		}
	}
	for _, d := range ds {
		t.Run(d.name, func(t *testing.T) {
			db, f, ledger := setup(t, d)
			ctx := context.Background()
			const base = 1<<63 + 4
			if applied, err := pay(ctx, d, db, f, ledger, "p-big", base); err != nil || !applied {
				t.Fatalf("first apply = %v, %v; want applied", applied, err)
			}
			if applied, err := pay(ctx, d, db, f, ledger, "p-big", base+1); err != nil || applied {
				t.Fatalf("the next holder = %v, %v; want already applied", applied, err)
			}
			if _, err := pay(ctx, d, db, f, ledger, "p-big", base); !errors.Is(err, sqlfence.ErrSuperseded) {
				t.Fatalf("the holder the next one fenced out = %v, want ErrSuperseded", err)
			}
		})
	}
}
