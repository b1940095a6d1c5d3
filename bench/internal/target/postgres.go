package target

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/l4xg/grid/bench/internal/workload"
)

// Row states of the idempotency table.
const (
	pgProcessing = 1
	pgCompleted  = 2
)

// pgSpareConnections is how many of the server's free connection slots a
// pool leaves to others (psql, other tests) when it has to be capped.
const pgSpareConnections = 5

// ErrPostgresNoConnections is a server without a free connection slot for
// the pool.
var ErrPostgresNoConnections = errors.New("target: postgres: no free connection slot")

// Postgres is a connection pool to a PostgreSQL server, on which each
// benchmark cell gets an idempotency table of its own (CreateTable): the
// table teams write themselves when their database is the store.
type Postgres struct {
	pool *pgxpool.Pool
	info PostgresInfo
}

// PostgresInfo is what NewPostgres found of the server and made of the
// pool.
type PostgresInfo struct {
	// Server is where: host:port/database and user, without a password.
	Server  string
	Version string
	// Fsync and SynchronousCommit are the server's settings (SHOW).
	Fsync             string
	SynchronousCommit string
	// PoolSize is the pool's connections: the size asked for, or fewer
	// when the server's max_connections leaves fewer free (Capped).
	PoolSize int
	Asked    int
	// MaxConnections is the server's max_connections less its
	// superuser_reserved_connections.
	MaxConnections int
	Capped         bool
}

// Durable reports whether a commit the server acknowledged is on disk:
// fsync on, and synchronous_commit not off (on, local, remote_write and
// remote_apply all flush the WAL locally before the answer).
func (i PostgresInfo) Durable() bool {
	return i.Fsync == "on" && i.SynchronousCommit != "off"
}

// NewPostgres connects to the server of dsn with a pool of poolSize
// connections (fewer if the server has fewer free: see PostgresInfo), and
// reads its fsync and synchronous_commit.
func NewPostgres(ctx context.Context, dsn string, poolSize int) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	cc := cfg.ConnConfig
	info := PostgresInfo{Server: fmt.Sprintf("%s:%d/%s as %s", cc.Host, cc.Port, cc.Database, cc.User), Asked: poolSize}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cc)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", info.Server, err)
	}
	var inUse int
	err = conn.QueryRow(cctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('max_connections')::int
		- current_setting('superuser_reserved_connections')::int, (SELECT count(*) FROM pg_stat_activity)`).
		Scan(&info.Version, &info.Fsync, &info.SynchronousCommit, &info.MaxConnections, &inUse)
	conn.Close(cctx)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: settings: %w", info.Server, err)
	}
	info.PoolSize = poolSize
	// pg_stat_activity counts the server's own processes too, so this
	// leaves a little more than pgSpareConnections.
	if free := info.MaxConnections - inUse - pgSpareConnections; free < poolSize {
		if free < 1 {
			return nil, fmt.Errorf("%w: %d of %d in use", ErrPostgresNoConnections, inUse, info.MaxConnections)
		}
		info.PoolSize, info.Capped = free, true
	}
	cfg.MaxConns = int32(info.PoolSize)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", info.Server, err)
	}
	if err := pool.Ping(cctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres %s: %w", info.Server, err)
	}
	return &Postgres{pool: pool, info: info}, nil
}

// Info is what NewPostgres found of the server.
func (p *Postgres) Info() PostgresInfo { return p.info }

// Close closes the pool.
func (p *Postgres) Close() { p.pool.Close() }

// RedactDSN is dsn fit to be written down: a URL without its password; a
// key=value DSN is not repeated at all.
func RedactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "(a key=value DSN)"
	}
	return u.Redacted()
}

// CreateTable creates the idempotency table name,
//
//	(namespace text, key text, state smallint, lease_until timestamptz,
//	 token bigint, primary key (namespace, key))
//
// and returns the target that works on it. Drop removes it.
func (p *Postgres) CreateTable(ctx context.Context, name string) (*PostgresTable, error) {
	t := &PostgresTable{pool: p.pool, ident: pgx.Identifier{name}.Sanitize()}
	_, err := p.pool.Exec(ctx, `CREATE TABLE `+t.ident+` (
		namespace text NOT NULL, key text NOT NULL, state smallint NOT NULL,
		lease_until timestamptz NOT NULL, token bigint NOT NULL,
		PRIMARY KEY (namespace, key))`)
	if err != nil {
		return nil, fmt.Errorf("postgres: create table %s: %w", t.ident, err)
	}
	t.sqlReserve = `WITH ins AS (
		INSERT INTO ` + t.ident + ` (namespace, key, state, lease_until, token)
		VALUES ($1, $2, 1, now() + $3::float8 * interval '1 second', $4)
		ON CONFLICT (namespace, key) DO NOTHING RETURNING token
	), took AS (
		UPDATE ` + t.ident + ` SET state = 1, lease_until = now() + $3::float8 * interval '1 second', token = $4
		WHERE namespace = $1 AND key = $2 AND lease_until < now() AND NOT EXISTS (SELECT FROM ins)
		RETURNING token
	)
	SELECT token FROM ins UNION ALL SELECT token FROM took`
	t.sqlComplete = `UPDATE ` + t.ident + ` SET state = 2, lease_until = now() + $4::float8 * interval '1 second'
		WHERE namespace = $1 AND key = $2 AND token = $3 AND state = 1 AND lease_until > now()`
	t.sqlBatch = `INSERT INTO ` + t.ident + ` (namespace, key, state, lease_until, token)
		SELECT $1, k, 1, now() + $3::float8 * interval '1 second', tok FROM unnest($2::text[], $4::bigint[]) AS u(k, tok)
		ON CONFLICT (namespace, key) DO NOTHING RETURNING key, token`
	return t, nil
}

// PostgresTable is one idempotency table (CreateTable), the way a team
// writes it in its own database. The row of a key holds its state
// (1 processing, 2 completed), its token and lease_until: the end of the
// lease while processing, of the retention once completed. A row whose
// lease_until has passed counts as absent.
//
// Reserve inserts the row if absent (INSERT ... ON CONFLICT DO NOTHING
// RETURNING token: acquired when a row comes back), and in the same
// statement takes over an expired one (an UPDATE guarded by lease_until <
// now()), so a refused reserve writes nothing: no WAL, no commit to flush.
// Complete is an UPDATE to completed, fenced by the token, with the
// retention as lease_until. ReserveBatch is one multi-row INSERT ... ON
// CONFLICT DO NOTHING RETURNING key (it does not take over expired rows).
// Tokens are random, positive and made by the client.
type PostgresTable struct {
	pool  *pgxpool.Pool
	ident string // the table's name, quoted

	sqlReserve, sqlComplete, sqlBatch string
}

var _ workload.Target = (*PostgresTable)(nil)

// Name implements workload.Target.
func (t *PostgresTable) Name() string { return "postgres" }

// Drop drops the table.
func (t *PostgresTable) Drop(ctx context.Context) error {
	if _, err := t.pool.Exec(ctx, `DROP TABLE IF EXISTS `+t.ident); err != nil {
		return fmt.Errorf("postgres: drop table %s: %w", t.ident, err)
	}
	return nil
}

// pgToken is a random positive token.
func pgToken() int64 { return rand.Int64() | 1 }

// Reserve inserts the key as processing for lease, or takes over its
// expired row, in one statement.
func (t *PostgresTable) Reserve(ctx context.Context, key string, lease time.Duration) (workload.Reservation, error) {
	var tok int64
	err := t.pool.QueryRow(ctx, t.sqlReserve, Namespace, key, lease.Seconds(), pgToken()).Scan(&tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return workload.Reservation{Key: key}, nil
	}
	if err != nil {
		return workload.Reservation{}, err
	}
	return workload.Reservation{Key: key, Acquired: true, Token: uint64(tok)}, nil
}

// Complete sets the key completed, kept for retention, if this reservation
// still holds it.
func (t *PostgresTable) Complete(ctx context.Context, r workload.Reservation, retention time.Duration) error {
	tag, err := t.pool.Exec(ctx, t.sqlComplete, Namespace, r.Key, int64(r.Token), retention.Seconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s", ErrLeaseLost, r.Key)
	}
	return nil
}

// ReserveBatch inserts every absent key in one statement; the keys whose
// row comes back are acquired.
func (t *PostgresTable) ReserveBatch(ctx context.Context, keys []string, lease time.Duration) ([]workload.Reservation, error) {
	toks := make([]int64, len(keys))
	for i := range toks {
		toks[i] = pgToken()
	}
	rows, err := t.pool.Query(ctx, t.sqlBatch, Namespace, keys, lease.Seconds(), toks)
	if err != nil {
		return nil, err
	}
	got := make(map[string]int64, len(keys))
	var key string
	var tok int64
	_, err = pgx.ForEachRow(rows, []any{&key, &tok}, func() error {
		got[key] = tok
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]workload.Reservation, len(keys))
	for i, k := range keys {
		tok, ok := got[k]
		out[i] = workload.Reservation{Key: k, Acquired: ok, Token: uint64(tok)}
	}
	return out, nil
}

// Memory is pg_total_relation_size of the table (heap, TOAST, indexes,
// free-space and visibility maps); the primary key's pg_indexes_size is
// an extra.
func (t *PostgresTable) Memory(ctx context.Context) (workload.Memory, error) {
	var total, idx int64
	err := t.pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass), pg_indexes_size($1::regclass)`, t.ident).Scan(&total, &idx)
	if err != nil {
		return workload.Memory{}, fmt.Errorf("postgres: size of %s: %w", t.ident, err)
	}
	return workload.Memory{Bytes: total, Source: "pg_total_relation_size of the table",
		Extra: map[string]int64{"indexes_bytes": idx}}, nil
}

// TableName is a table name for a cell's key prefix: "bench_" and the
// prefix's letters and digits, with an underscore for anything else.
func TableName(prefix string) string {
	var b strings.Builder
	b.WriteString("bench_")
	for _, r := range strings.ToLower(prefix) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return strings.TrimRight(b.String(), "_")
}
