package target

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// testPostgresDSN is the server the tests use; GRID_TEST_POSTGRES_DSN
// names another.
const testPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func testDSN() string {
	if dsn := os.Getenv("GRID_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return testPostgresDSN
}

// startPostgres connects to the test server, skipping the test when there
// is none, and gives a fresh table, dropped at the end of the test.
func startPostgres(t *testing.T) (*Postgres, *PostgresTable) {
	t.Helper()
	ctx := context.Background()
	p, err := NewPostgres(ctx, testDSN(), 8)
	if err != nil {
		t.Skipf("no PostgreSQL: %v", err)
	}
	t.Cleanup(p.Close)
	name := TableName(testPrefix())
	tbl, err := p.CreateTable(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tbl.Drop(ctx); err != nil {
			t.Errorf("drop: %v", err)
		}
	})
	return p, tbl
}

func TestPostgresContract(t *testing.T) {
	_, tbl := startPostgres(t)
	prefix := testPrefix()
	contract(t, tbl, prefix)

	// The rows are what the operations claim: completed until the end of
	// the retention, held until the end of the lease.
	ctx := context.Background()
	for key, want := range map[string]struct {
		state int16
		until time.Duration
	}{prefix + "k1": {pgCompleted, testRetention}, prefix + "b1": {pgProcessing, testLease}} {
		var state int16
		var left float64
		err := tbl.pool.QueryRow(ctx, `SELECT state, extract(epoch FROM lease_until - now()) FROM `+tbl.ident+
			` WHERE namespace = $1 AND key = $2`, Namespace, key).Scan(&state, &left)
		if err != nil || state != want.state || left <= 0 || left > want.until.Seconds() || left < want.until.Seconds()-60 {
			t.Fatalf("%s: state %d, %.0f s left (%v): want %d, about %v", key, state, left, err, want.state, want.until)
		}
	}
	m, err := tbl.Memory(ctx)
	if err != nil || m.Bytes < 8192 || m.Extra["indexes_bytes"] <= 0 || m.Extra["indexes_bytes"] >= m.Bytes {
		t.Fatalf("memory %+v, %v", m, err)
	}
}

// A reserve takes over a row whose lease has passed, with a new token; the
// holder of the old token can no longer complete it, nor can anyone
// complete a key held by someone else.
func TestPostgresTakesOverExpiredLeases(t *testing.T) {
	_, tbl := startPostgres(t)
	ctx := context.Background()
	old, err := tbl.Reserve(ctx, "k", testLease)
	if err != nil || !old.Acquired {
		t.Fatal(old, err)
	}
	// The lease runs out: move it to the past rather than wait.
	if _, err := tbl.pool.Exec(ctx, `UPDATE `+tbl.ident+` SET lease_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	r, err := tbl.Reserve(ctx, "k", testLease)
	if err != nil || !r.Acquired || r.Token == old.Token {
		t.Fatalf("reserve of an expired key: %+v, %v (old token %d)", r, err, old.Token)
	}
	if again, err := tbl.Reserve(ctx, "k", testLease); err != nil || again.Acquired {
		t.Fatalf("reserve of the key taken over: %+v, %v: want refused", again, err)
	}
	if err := tbl.Complete(ctx, old, testRetention); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("complete with the superseded token: %v, want ErrLeaseLost", err)
	}
	if err := tbl.Complete(ctx, r, testRetention); err != nil {
		t.Fatalf("complete by the new holder: %v", err)
	}
	// A completed key whose retention has passed is free again too.
	if _, err := tbl.pool.Exec(ctx, `UPDATE `+tbl.ident+` SET lease_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if r, err := tbl.Reserve(ctx, "k", testLease); err != nil || !r.Acquired {
		t.Fatalf("reserve after the retention: %+v, %v", r, err)
	}
}

// A refused reserve writes nothing (no row, no row lock): its transaction
// gets no id, so its commit has no WAL to flush, and the duplicates a
// receiver refuses cost no fsync.
func TestPostgresRefusedReserveWritesNothing(t *testing.T) {
	_, tbl := startPostgres(t)
	ctx := context.Background()
	if r, err := tbl.Reserve(ctx, "k", testLease); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	conn, err := tbl.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// Inside a transaction: a statement that wrote anything (a row, a row
	// lock) has given the transaction an id.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, tbl.sqlReserve, Namespace, "k", testLease.Seconds(), pgToken())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if rows.Close(); rows.Err() != nil || n != 0 {
		t.Fatalf("refused reserve: %d rows, %v", n, rows.Err())
	}
	var xid *string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if xid != nil {
		t.Fatalf("the refused reserve wrote: its transaction got id %s", *xid)
	}
	// The same check sees a write: a reserve that acquires.
	if _, err := tx.Exec(ctx, tbl.sqlReserve, Namespace, "new", testLease.Seconds(), pgToken()); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&xid); err != nil || xid == nil {
		t.Fatalf("an acquiring reserve left no transaction id (%v)", err)
	}
}

func TestPostgresInfo(t *testing.T) {
	p, _ := startPostgres(t)
	i := p.Info()
	if i.Version == "" || i.PoolSize < 1 || i.PoolSize > 8 || i.Asked != 8 || i.MaxConnections < 1 || i.Capped != (i.PoolSize < 8) {
		t.Fatalf("info %+v", i)
	}
	if i.Durable() != (i.Fsync == "on" && i.SynchronousCommit != "off") {
		t.Fatalf("durable %v with %+v", i.Durable(), i)
	}
	for _, c := range []struct {
		fsync, sync string
		want        bool
	}{{"on", "on", true}, {"on", "local", true}, {"on", "remote_apply", true}, {"off", "on", false}, {"on", "off", false}} {
		if got := (PostgresInfo{Fsync: c.fsync, SynchronousCommit: c.sync}).Durable(); got != c.want {
			t.Errorf("fsync %s, synchronous_commit %s: durable %v", c.fsync, c.sync, got)
		}
	}
	// A pool bigger than the server's free slots is capped to them.
	big, err := NewPostgres(context.Background(), testDSN(), 100000)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	if bi := big.Info(); !bi.Capped || bi.PoolSize >= bi.MaxConnections || bi.PoolSize < 1 {
		t.Fatalf("a pool of 100000: %+v", bi)
	}
}

func TestTableNameAndRedactDSN(t *testing.T) {
	for prefix, want := range map[string]string{"b1a2b3c-1-0:": "bench_b1a2b3c_1_0", "b1a2b3c-1-0-2:": "bench_b1a2b3c_1_0_2", "X.y": "bench_x_y"} {
		if got := TableName(prefix); got != want {
			t.Errorf("TableName(%q) = %q, want %q", prefix, got, want)
		}
	}
	if got := RedactDSN("postgres://u:secret@h:5432/db?sslmode=disable"); got != "postgres://u:xxxxx@h:5432/db?sslmode=disable" {
		t.Errorf("redacted %q", got)
	}
	if got := RedactDSN("host=h password=secret"); got != "(a key=value DSN)" {
		t.Errorf("redacted %q", got)
	}
}
