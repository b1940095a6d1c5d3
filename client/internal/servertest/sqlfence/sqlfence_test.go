package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/l4xg/grid/client"
	"github.com/l4xg/grid/client/sqlfence"
	"github.com/l4xg/grid/internal/gridtest"
)

// These tests run against the PostgreSQL server on 127.0.0.1:5432
// (database test, trust auth, or GRID_TEST_POSTGRES_DSN) and the MariaDB
// server on 127.0.0.1:3306 (root without a password, database test, or
// GRID_TEST_MARIADB_DSN). Without them they are skipped, unless
// GRID_TEST_BROKERS=required (as .ci/run sets it).

// dialect is one database the fence speaks.
type dialect struct {
	name, driver, env, dsn string
	fence                  func(string) (*sqlfence.Fence, error)
	bind                   func(i int) string // the i-th placeholder, from 1
}

func dialects() []dialect {
	return []dialect{
		{"postgres", "pgx", "GRID_TEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", sqlfence.New,
			func(i int) string { return fmt.Sprintf("$%d", i) }},
		{"mariadb", "mysql", "GRID_TEST_MARIADB_DSN", "root@tcp(127.0.0.1:3306)/test", sqlfence.NewMariaDB,
			func(int) string { return "?" }},
	}
}

// eachDialect runs f on every dialect.
func eachDialect(t *testing.T, f func(t *testing.T, d dialect)) {
	for _, d := range dialects() {
		t.Run(d.name, func(t *testing.T) { f(t, d) })
	}
}

// setup opens the database and a fence on a table of the test's own, with
// a ledger table beside it; both are dropped when the test ends.
func setup(t *testing.T, d dialect) (*sql.DB, *sqlfence.Fence, string) {
	t.Helper()
	dsn := d.dsn
	if v := os.Getenv(d.env); v != "" {
		dsn = v
	}
	db, err := sql.Open(d.driver, dsn)
	if err == nil {
		err = db.PingContext(context.Background())
	}
	if err != nil {
		if os.Getenv("GRID_TEST_BROKERS") == "required" {
			t.Fatalf("%s at %s: %v", d.name, dsn, err)
		}
		t.Skipf("no %s at %s (%v); GRID_TEST_BROKERS=required makes this a failure", d.name, dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	suffix := fmt.Sprintf("%x", rand.Uint32())
	table := "fence_" + suffix
	f, err := d.fence(table)
	if err != nil {
		t.Fatal(err)
	}
	ledger := "ledger_" + suffix
	for _, stmt := range []string{f.Schema(), `CREATE TABLE ` + ledger + ` (pkey VARCHAR(200) NOT NULL, amount BIGINT NOT NULL)`} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + table)
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + ledger)
	})
	return db, f, ledger
}

// pay applies a payment of key under token in one transaction, as a
// consumer does: the fence first, the effect only if it is the first.
func pay(ctx context.Context, d dialect, db *sql.DB, f *sqlfence.Fence, ledger, key string, token uint64) (applied bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if applied, err = f.Apply(ctx, tx, "payments", key, token); err != nil {
		return false, err
	}
	if applied {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+ledger+` (pkey, amount) VALUES (`+d.bind(1)+`, 100)`, key); err != nil {
			return false, err
		}
	}
	return applied, tx.Commit()
}

func effects(t *testing.T, d dialect, db *sql.DB, ledger, key string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM `+ledger+` WHERE pkey = `+d.bind(1), key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A repeated apply is reported as done; an older holder is refused and
// changes nothing; a newer one is told the effect is there, and fences the
// older one out from then on.
func TestApplyOnceAndFence(t *testing.T) { eachDialect(t, testApplyOnceAndFence) }

func testApplyOnceAndFence(t *testing.T, d dialect) {
	db, f, ledger := setup(t, d)
	ctx := context.Background()
	if applied, err := pay(ctx, d, db, f, ledger, "p-1", 10); err != nil || !applied {
		t.Fatalf("first apply = %v, %v; want applied", applied, err)
	}
	if applied, err := pay(ctx, d, db, f, ledger, "p-1", 10); err != nil || applied {
		t.Fatalf("the same holder again = %v, %v; want already applied", applied, err)
	}
	if _, err := pay(ctx, d, db, f, ledger, "p-1", 7); !errors.Is(err, sqlfence.ErrSuperseded) {
		t.Fatalf("an older holder = %v, want ErrSuperseded", err)
	}
	if applied, err := pay(ctx, d, db, f, ledger, "p-1", 12); err != nil || applied {
		t.Fatalf("a newer holder = %v, %v; want already applied", applied, err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := f.Check(ctx, tx, "payments", "p-1", 10); !errors.Is(err, sqlfence.ErrSuperseded) {
		t.Fatalf("Check of the holder the newer one fenced out = %v, want ErrSuperseded", err)
	}
	if err := f.Check(ctx, tx, "payments", "p-1", 12); err != nil {
		t.Fatalf("Check of the newest holder = %v", err)
	}
	if err := f.Check(ctx, tx, "payments", "never-seen", 1); err != nil {
		t.Fatalf("Check of a key without a row = %v", err)
	}
	if n := effects(t, d, db, ledger, "p-1"); n != 1 {
		t.Fatalf("payment applied %d times", n)
	}
	// Tokens use all 64 bits.
	if applied, err := pay(ctx, d, db, f, ledger, "p-big", 1<<63+5); err != nil || !applied {
		t.Fatalf("a token above 2^63 = %v, %v", applied, err)
	}
	if _, err := pay(ctx, d, db, f, ledger, "p-big", 1<<63+4); !errors.Is(err, sqlfence.ErrSuperseded) {
		t.Fatalf("a smaller token above 2^63 = %v, want ErrSuperseded", err)
	}
	if _, err := sqlfence.New("fence; DROP TABLE x"); err == nil {
		t.Fatal("New accepted a table name that needs quoting")
	}
}

// The failure no idempotency store closes alone: a consumer commits the
// payment and dies before Complete. Its lease runs out; the next holder
// gets a larger token, finds the payment recorded, does not apply it again,
// and completes the key.
func TestCrashBetweenCommitAndComplete(t *testing.T) {
	eachDialect(t, testCrashBetweenCommitAndComplete)
}

func testCrashBetweenCommitAndComplete(t *testing.T, d dialect) {
	db, f, ledger := setup(t, d)
	n := gridtest.Start(t)
	dial := func() *client.Client {
		c, err := client.Dial(context.Background(), n.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease := client.WithLease(time.Second)

	// The first consumer commits, then "dies": its client goes away before
	// the handler returns, so nothing completes or fails the key.
	a := dial()
	committed := make(chan uint64, 1)
	done := make(chan error, 1)
	go func() {
		_, err := a.Process(ctx, "payments", "p-crash", func(hctx context.Context, l client.Lease) ([]byte, error) {
			if _, err := pay(hctx, d, db, f, ledger, l.Key, l.Token); err != nil {
				return nil, err
			}
			committed <- l.Token
			<-hctx.Done()
			return nil, hctx.Err()
		}, lease)
		done <- err
	}()
	first := <-committed
	a.Close()
	<-done

	b := dial()
	var second uint64
	var sawApplied bool
	out, err := b.Process(ctx, "payments", "p-crash", func(hctx context.Context, l client.Lease) ([]byte, error) {
		second = l.Token
		applied, err := pay(hctx, d, db, f, ledger, l.Key, l.Token)
		sawApplied = applied
		return []byte("ok"), err
	}, lease, client.WaitForHolder())
	if err != nil || out.Duplicate {
		t.Fatalf("the takeover: %+v, %v", out, err)
	}
	if second <= first || sawApplied {
		t.Fatalf("takeover token %d after %d, applied again: %v; want a larger token that found the payment", second, first, sawApplied)
	}
	if n := effects(t, d, db, ledger, "p-crash"); n != 1 {
		t.Fatalf("payment applied %d times", n)
	}
	g, err := b.Get(ctx, "payments", "p-crash")
	if err != nil || g.State != client.StateCompleted {
		t.Fatalf("key after the takeover: %+v, %v; want COMPLETED", g, err)
	}
}
