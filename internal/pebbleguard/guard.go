package pebbleguard

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// DB guards one open Pebble database.
type DB struct {
	mu     sync.RWMutex
	db     *pebble.DB // nil once closed
	closed error
}

// New guards db. closed is the error Acquire returns once the database is
// closed: the owning package's ErrClosed.
func New(db *pebble.DB, closed error) *DB { return &DB{db: db, closed: closed} }

// Acquire returns the open database, held shared until Release; once
// closed it returns the closed error and holds nothing.
func (g *DB) Acquire() (*pebble.DB, error) {
	g.mu.RLock()
	if g.db == nil {
		g.mu.RUnlock()
		return nil, g.closed
	}
	return g.db, nil
}

// Release ends a hold taken by a successful Acquire.
func (g *DB) Release() { g.mu.RUnlock() }

// With runs fn with the open database, held for the call; once closed it
// returns the closed error without calling fn.
func (g *DB) With(fn func(db *pebble.DB) error) error {
	db, err := g.Acquire()
	if err != nil {
		return err
	}
	defer g.Release()
	return fn(db)
}

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
