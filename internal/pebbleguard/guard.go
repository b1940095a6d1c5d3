// Package pebbleguard lets a Pebble database be closed while other
// goroutines use it: users hold it shared for each operation, and Close
// waits for them, closes it once, and makes later Acquires fail instead of
// reaching a closed database (which Pebble answers with a panic). raftlog
// and tiering both keep their Pebble this way.
package pebbleguard

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// DB guards one open Pebble database.
type DB struct {
	mu sync.RWMutex
	db *pebble.DB // nil once closed
}

// New guards db.
func New(db *pebble.DB) *DB { return &DB{db: db} }

// Acquire returns the open database, held shared until Release, and true;
// once closed it returns false and holds nothing.
func (g *DB) Acquire() (*pebble.DB, bool) {
	g.mu.RLock()
	if g.db == nil {
		g.mu.RUnlock()
		return nil, false
	}
	return g.db, true
}

// Release ends a hold taken by a successful Acquire.
func (g *DB) Release() { g.mu.RUnlock() }

// Close waits for the holds in progress and closes the database; later
// calls return nil.
func (g *DB) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.db == nil {
		return nil
	}
	err := g.db.Close()
	g.db = nil
	return err
}
