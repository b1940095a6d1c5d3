// Package sqlfence records a message's effect in the consumer's own SQL
// transaction, keyed by its idempotency key and fenced by the grid's
// token. It closes the gap no idempotency store closes on its own: a
// handler that committed its effect and died before Complete. The next
// holder of the key (a larger token) finds the effect recorded and only
// completes the key; a holder whose lease was taken over (a smaller token
// than the one recorded) is refused.
//
//	tx, _ := db.BeginTx(ctx, nil)
//	applied, err := fence.Apply(ctx, tx, l.Namespace, l.Key, l.Token)
//	switch {
//	case errors.Is(err, sqlfence.ErrSuperseded): // a newer holder exists: roll back, stop
//	case err != nil:                             // roll back, fail the attempt
//	case applied:                                // first time: make the effect in tx
//	}
//	tx.Commit()
//
// The table (Fence.Schema) holds one row per key: the namespace, the key
// and the largest token that applied or confirmed it. New speaks
// PostgreSQL, NewMariaDB MariaDB (and MySQL); both are tested on real
// servers.
package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrSuperseded reports that a holder with a larger token has recorded the
// key: this holder's lease was lost, and it must not make its effect.
var ErrSuperseded = errors.New("sqlfence: superseded by a newer holder of the key")

// Fence records effects in one table.
type Fence struct {
	table   string
	mariadb bool
}

// New returns a Fence on table (a plain or schema-qualified SQL name).
func New(table string) (*Fence, error) {
	if !validTable(table) {
		return nil, fmt.Errorf("sqlfence: table name %q: want letters, digits and underscores, optionally schema.table", table)
	}
	return &Fence{table: table}, nil
}

// NewMariaDB returns a Fence on table for MariaDB or MySQL (InnoDB). It
// does not depend on how the connection counts affected rows: a DSN with
// clientFoundRows=true fences as one without.
func NewMariaDB(table string) (*Fence, error) {
	f, err := New(table)
	if f != nil {
		f.mariadb = true
	}
	return f, err
}

// validTable reports whether name is an SQL identifier of at most 63
// letters, digits and underscores (not starting with a digit), or two of
// them joined by a dot: nothing that needs quoting.
func validTable(name string) bool {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 63 || (p[0] >= '0' && p[0] <= '9') {
			return false
		}
		for _, c := range p {
			if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
				return false
			}
		}
	}
	return true
}

// Schema is the statement that creates the fence's table if it does not
// exist. Tokens are unsigned 64-bit, so they are stored as NUMERIC(20).
func (f *Fence) Schema() string {
	if f.mariadb {
		return "CREATE TABLE IF NOT EXISTS " + f.table + ` (
	namespace  VARCHAR(64)     NOT NULL,
	` + "`key`" + `      VARBINARY(1024) NOT NULL,
	token      DECIMAL(20,0)   NOT NULL,
	applied_at TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	PRIMARY KEY (namespace, ` + "`key`" + `)
) ENGINE=InnoDB`
	}
	return `CREATE TABLE IF NOT EXISTS ` + f.table + ` (
	namespace  TEXT          NOT NULL,
	key        TEXT          NOT NULL,
	token      NUMERIC(20,0) NOT NULL,
	applied_at TIMESTAMPTZ   NOT NULL DEFAULT now(),
	PRIMARY KEY (namespace, key)
)`
}

// Apply records that the holder of (ns, key) with token makes the key's
// effect, in tx, and reports whether it is the first to (applied): then the
// caller makes the effect in the same transaction. applied is false when an
// earlier holder recorded the effect already (its transaction committed;
// it may have died before completing the key): the caller must not make
// the effect again, only complete the key. Either way the row now carries
// token, so an older holder's later Apply or Check is refused. A larger
// token recorded already returns ErrSuperseded, and nothing is changed.
// Token 0 is refused: the grid never grants it.
//
// The row is locked until tx ends, so concurrent holders of one key are
// serialized by the database as well as by the grid.
func (f *Fence) Apply(ctx context.Context, tx *sql.Tx, ns, key string, token uint64) (applied bool, err error) {
	if token == 0 {
		return false, fmt.Errorf("sqlfence: apply %s/%s: token 0, which the grid never grants", ns, key)
	}
	if f.mariadb {
		return f.applyMariaDB(ctx, tx, ns, key, token)
	}
	// xmax is 0 on a row this statement inserted, and the locking
	// transaction's id on one it updated.
	row := tx.QueryRowContext(ctx, `INSERT INTO `+f.table+` AS t (namespace, key, token) VALUES ($1, $2, $3)
ON CONFLICT (namespace, key) DO UPDATE SET token = EXCLUDED.token WHERE t.token <= EXCLUDED.token
RETURNING (xmax = 0)`, ns, key, strconv.FormatUint(token, 10))
	if err := row.Scan(&applied); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, f.superseded(ctx, tx, ns, key, token)
		}
		return false, fmt.Errorf("sqlfence: apply %s/%s: %w", ns, key, err)
	}
	return applied, nil
}

// applyMariaDB is Apply for MariaDB and MySQL. It does not read the
// upsert's affected rows: with CLIENT_FOUND_ROWS (clientFoundRows=true in a
// go-sql-driver DSN) a row the upsert left unchanged counts 1, as an
// inserted one does, so a repeat and a superseded holder would both look
// like a first apply. Instead the upsert reports the token it found:
// LAST_INSERT_ID(expr) on the update path sets the statement's insert id
// (the OK packet's, so the result's LastInsertId) to the stored token,
// while an insert into this table, which has no AUTO_INCREMENT column,
// leaves it 0. Tokens are never 0, so 0 means inserted. Both sides of
// the comparison are unsigned 64-bit integers, exact in every bit. The
// statement compares and sets under the row's exclusive lock, which it keeps until
// tx ends, as the upsert always did.
func (f *Fence) applyMariaDB(ctx context.Context, tx *sql.Tx, ns, key string, token uint64) (bool, error) {
	t := strconv.FormatUint(token, 10)
	res, err := tx.ExecContext(ctx, "INSERT INTO "+f.table+" (namespace, `key`, token) VALUES (?, ?, ?) "+
		"ON DUPLICATE KEY UPDATE token = IF(LAST_INSERT_ID(CAST(token AS UNSIGNED)) < CAST(? AS UNSIGNED), ?, token)",
		ns, key, t, t, t)
	if err != nil {
		return false, fmt.Errorf("sqlfence: apply %s/%s: %w", ns, key, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return false, fmt.Errorf("sqlfence: apply %s/%s: %w", ns, key, err)
	}
	switch found := uint64(id); {
	case found == 0:
		if n, err := res.RowsAffected(); err == nil && n == 2 {
			// Raised a row without reporting its token: a server that does
			// not return LAST_INSERT_ID(expr) for the update path.
			return false, fmt.Errorf("sqlfence: apply %s/%s: the server updated the row but did not report its token", ns, key)
		}
		return true, nil
	case found > token:
		return false, fmt.Errorf("%w: %s/%s has token %d, this holder %d", ErrSuperseded, ns, key, found, token)
	default:
		// The same token (applied already) or a smaller one, now raised.
		return false, nil
	}
}

// Check refuses, with ErrSuperseded, a holder whose token is smaller than
// the one recorded for (ns, key), and locks the row until tx ends: for an
// effect made in several statements, to call before each. A key with no
// row passes.
func (f *Fence) Check(ctx context.Context, tx *sql.Tx, ns, key string, token uint64) error {
	var recorded string
	q := `SELECT token::text FROM ` + f.table + ` WHERE namespace = $1 AND key = $2 FOR UPDATE`
	if f.mariadb {
		q = "SELECT CAST(token AS CHAR) FROM " + f.table + " WHERE namespace = ? AND `key` = ? FOR UPDATE"
	}
	err := tx.QueryRowContext(ctx, q, ns, key).Scan(&recorded)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlfence: check %s/%s: %w", ns, key, err)
	}
	r, err := strconv.ParseUint(recorded, 10, 64)
	if err != nil {
		return fmt.Errorf("sqlfence: %s/%s holds token %q: %w", ns, key, recorded, err)
	}
	if r > token {
		return fmt.Errorf("%w: %s/%s has token %d, this holder %d", ErrSuperseded, ns, key, r, token)
	}
	return nil
}

// superseded returns ErrSuperseded naming the recorded token.
func (f *Fence) superseded(ctx context.Context, tx *sql.Tx, ns, key string, token uint64) error {
	if err := f.Check(ctx, tx, ns, key, token); err != nil {
		return err
	}
	return fmt.Errorf("sqlfence: apply %s/%s: the row refused token %d, yet no larger one is recorded", ns, key, token)
}
