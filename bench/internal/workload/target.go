package workload

import (
	"context"
	"time"
)

// Target is a store under test. Its methods are safe for concurrent use.
type Target interface {
	// Name is the target's short name ("grid", "redis", "etcd").
	Name() string
	// Reserve puts key if absent, held for lease. A key that exists is
	// refused (Acquired false): a duplicate suppressed.
	Reserve(ctx context.Context, key string, lease time.Duration) (Reservation, error)
	// Complete settles a key this caller reserved, kept for retention; a
	// later Reserve of it must be refused.
	Complete(ctx context.Context, r Reservation, retention time.Duration) error
	// ReserveBatch reserves many keys in one call (or the target's nearest
	// equivalent), one Reservation per key, in order.
	ReserveBatch(ctx context.Context, keys []string, lease time.Duration) ([]Reservation, error)
	// Memory is the server's own memory figure, for bytes per key.
	Memory(ctx context.Context) (Memory, error)
}

// Reservation is the answer to a reserve of one key.
type Reservation struct {
	Key      string
	Acquired bool
	// Token is what Complete needs to settle the key: the grid's fencing
	// token, etcd's create revision, Redis's stored value.
	Token uint64
}

// Memory is a server's memory figure and where it comes from.
type Memory struct {
	Bytes  int64  `json:"bytes"`
	Source string `json:"source"`
	// Extra holds secondary figures (the grid's Go heap in use, etcd's db
	// size in use), reported alongside.
	Extra map[string]int64 `json:"extra,omitempty"`
}
